import { describe, expect, it } from "vitest";
import { classifyAddress, createAddressPolicy, parseCidrList, type AddressCategory } from "./address-policy.js";
import { EgressError, type EgressErrorReason } from "./egress-error.js";

const chatWebhookPolicy = createAddressPolicy({ allowPrivateCidrs: [], requireHttps: true });

const refusedEverywhere: Array<[string, AddressCategory]> = [
  ["127.0.0.1", "loopback"],
  ["127.255.255.254", "loopback"],
  ["0.0.0.0", "unspecified"],
  ["0.1.2.3", "unspecified"],
  ["169.254.169.254", "cloudMetadata"],
  ["169.254.170.2", "cloudMetadata"],
  ["100.100.100.200", "cloudMetadata"],
  ["168.63.129.16", "cloudMetadata"],
  ["169.254.0.1", "linkLocal"],
  ["255.255.255.255", "broadcast"],
  ["224.0.0.1", "multicast"],
  ["239.255.255.250", "multicast"],
  ["240.0.0.1", "reserved"],
  ["192.0.0.8", "reserved"],
  ["192.88.99.1", "reserved"],
  ["192.175.48.1", "reserved"],
  ["192.0.2.1", "documentation"],
  ["198.51.100.7", "documentation"],
  ["203.0.113.9", "documentation"],
  ["198.18.0.1", "benchmarking"],
  ["::", "unspecified"],
  ["::1", "loopback"],
  ["fe80::1", "linkLocal"],
  ["fe80::1%eth0", "linkLocal"],
  ["fec0::1", "siteLocal"],
  ["ff02::1", "multicast"],
  ["100::1", "discard"],
  ["::7f00:1", "ipv4Compatible"],
  ["64:ff9b:1::a00:1", "nat64LocalUse"],
  ["2002:7f00:1::1", "6to4"],
  ["2002:808:808::1", "6to4"],
  ["2001::1", "teredo"],
  ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo"],
  ["2001:2::1", "benchmarking"],
  ["2001:db8::1", "documentation"],
  ["3fff::1", "documentation"],
  ["fd00:ec2::254", "cloudMetadata"],
  ["5f00::1", "reserved"],
  ["not-an-address", "invalid"],
];

const privateNetworks: Array<[string, AddressCategory]> = [
  ["10.0.0.1", "private"],
  ["172.16.0.1", "private"],
  ["172.31.255.255", "private"],
  ["192.168.1.1", "private"],
  ["100.64.0.1", "carrierGradeNat"],
  ["100.127.255.254", "carrierGradeNat"],
  ["fc00::1", "uniqueLocal"],
  ["fd12:3456::1", "uniqueLocal"],
];

/** IPv6 forms judged by the IPv4 address they carry. */
const embeddedPrivate: Array<[string, AddressCategory, AddressCategory]> = [
  ["::ffff:127.0.0.1", "ipv4Mapped", "loopback"],
  ["::ffff:7f00:1", "ipv4Mapped", "loopback"],
  ["::ffff:a9fe:a9fe", "ipv4Mapped", "cloudMetadata"],
  ["::ffff:10.0.0.1", "ipv4Mapped", "private"],
  ["::ffff:0:7f00:1", "ipv4Translated", "loopback"],
  ["::ffff:0:c0a8:101", "ipv4Translated", "private"],
  ["64:ff9b::7f00:1", "nat64", "loopback"],
  ["64:ff9b::a00:1", "nat64", "private"],
  ["64:ff9b::a9fe:a9fe", "nat64", "cloudMetadata"],
];

const publicAddresses = [
  "8.8.8.8",
  "1.1.1.1",
  "93.184.216.34",
  "172.32.0.1",
  "100.128.0.1",
  "2606:4700:4700::1111",
  "2a00:1450:4001:80e::200e",
  "::ffff:8.8.8.8",
  "64:ff9b::808:808",
];

describe("address classification", () => {
  it.each([...refusedEverywhere, ...privateNetworks])("%s is %s", (address, category) => {
    expect(classifyAddress(address)).toBe(category);
  });

  it.each(embeddedPrivate)("%s is %s", (address, category) => {
    expect(classifyAddress(address)).toBe(category);
  });

  it.each([
    ["0x7f.1", "loopback"],
    ["2130706433", "loopback"],
    ["0177.0.0.1", "loopback"],
    ["[::ffff:7f00:1]", "ipv4Mapped"],
    ["[::]", "unspecified"],
  ])("reads the odd spelling %s as %s", (address, category) => {
    expect(classifyAddress(address)).toBe(category);
  });
});

describe("chat-webhook policy (nothing private allowed)", () => {
  it.each([...refusedEverywhere, ...privateNetworks])("refuses %s (%s)", (address) => {
    expect(chatWebhookPolicy.checkAddress(address).allowed).toBe(false);
  });

  it.each(embeddedPrivate)("refuses %s, a %s form of a %s address", (address, _form, inner) => {
    const verdict = chatWebhookPolicy.checkAddress(address);
    expect(verdict.allowed).toBe(false);
    expect(verdict.embeddedIpv4?.category).toBe(inner);
  });

  it.each(publicAddresses)("allows the public address %s", (address) => {
    expect(chatWebhookPolicy.checkAddress(address)).toMatchObject({ allowed: true });
  });
});

describe("allow list", () => {
  const onPremises = createAddressPolicy({
    allowPrivateCidrs: ["127.0.0.0/8", "10.20.0.0/16", "fd00:1::/32"],
    requireHttps: true,
  });

  it.each(["127.0.0.1", "127.0.0.2", "::ffff:127.0.0.1", "10.20.1.1", "fd00:1::5"])("allows %s", (address) => {
    expect(onPremises.checkAddress(address).allowed).toBe(true);
  });

  it.each(["10.21.0.1", "::1", "192.168.1.1", "fd00:2::5", "169.254.169.254", "0.0.0.0"])("still refuses %s", (address) => {
    expect(onPremises.checkAddress(address).allowed).toBe(false);
  });

  it('does not let a catch-all entry unlock loopback, "any" or metadata addresses', () => {
    const everything = createAddressPolicy({ allowPrivateCidrs: ["0.0.0.0/0", "::/0"], requireHttps: true });
    for (const address of ["127.0.0.1", "0.0.0.0", "169.254.169.254", "::1", "::", "::ffff:127.0.0.1", "fd00:ec2::254"]) {
      expect(everything.checkAddress(address).allowed, address).toBe(false);
    }
    for (const address of ["10.0.0.1", "192.168.0.1", "fd00::1"]) {
      expect(everything.checkAddress(address).allowed, address).toBe(true);
    }
  });

  it("unlocks a metadata address only when it is named", () => {
    const named = createAddressPolicy({ allowPrivateCidrs: ["169.254.169.254/32"], requireHttps: true });
    expect(named.checkAddress("169.254.169.254").allowed).toBe(true);
    const broad = createAddressPolicy({ allowPrivateCidrs: ["169.254.0.0/16"], requireHttps: true });
    expect(broad.checkAddress("169.254.169.254").allowed).toBe(false);
    expect(broad.checkAddress("169.254.1.1").allowed).toBe(true);
  });

  it("rejects a bad entry when the policy is built", () => {
    expect(() => createAddressPolicy({ allowPrivateCidrs: ["10.0.0.0/33"], requireHttps: true })).toThrow(/allowPrivateCidrs: Invalid CIDR "10.0.0.0\/33"/);
  });
});

describe("allowPrivateByDefault (the remote-source kit's conformance check, run against a source on the developer's own network; the service refuses private networks)", () => {
  const kitCheck = createAddressPolicy({
    allowPrivateCidrs: [],
    denyCidrs: ["10.99.0.0/16", "fd99::/16"],
    requireHttps: false,
    allowPrivateByDefault: true,
  });

  it.each(privateNetworks.map(([address]) => address))("allows the private-network address %s", (address) => {
    expect(kitCheck.checkAddress(address)).toMatchObject({ allowed: true, reason: "private_network_allowed" });
  });

  it.each(["10.99.1.1", "::ffff:10.99.0.5", "fd99::1"])("refuses %s from a denied range", (address) => {
    expect(kitCheck.checkAddress(address)).toMatchObject({ allowed: false, reason: "denied_by_policy" });
  });

  it.each(refusedEverywhere.map(([address]) => address))("still refuses %s", (address) => {
    expect(kitCheck.checkAddress(address).allowed).toBe(false);
  });

  it("lets a denied range win over an allowed one", () => {
    const both = createAddressPolicy({ allowPrivateCidrs: ["10.0.0.0/8"], denyCidrs: ["10.0.0.0/24"], requireHttps: true });
    expect(both.checkAddress("10.0.0.1").allowed).toBe(false);
    expect(both.checkAddress("10.0.1.1").allowed).toBe(true);
  });
});

describe("URL checks", () => {
  const remoteSources = createAddressPolicy({ allowPrivateCidrs: [], requireHttps: false, allowPrivateByDefault: true });
  const secret = "sig=TOPSECRET";

  function refusal(check: () => unknown): EgressError {
    try {
      check();
    } catch (error) {
      expect(error).toBeInstanceOf(EgressError);
      return error as EgressError;
    }
    throw new Error("expected a refusal");
  }

  it.each<[string, EgressErrorReason]>([
    ["not a url", "invalid_url"],
    [`/relative/path?${secret}`, "invalid_url"],
    [`http://hooks.example.com/hook?${secret}`, "forbidden_scheme"],
    [`ftp://hooks.example.com/hook?${secret}`, "forbidden_scheme"],
    [`file:///etc/passwd?${secret}`, "forbidden_scheme"],
    [`gopher://hooks.example.com/hook?${secret}`, "forbidden_scheme"],
    [`https://alice:s3cr3tpw@hooks.example.com/hook?${secret}`, "forbidden_userinfo"],
    [`https://alice@hooks.example.com/hook?${secret}`, "forbidden_userinfo"],
    [`https://2130706433/hook?${secret}`, "forbidden_address"],
    [`https://[::ffff:7f00:1]/hook?${secret}`, "forbidden_address"],
  ])("refuses %s for a chat webhook (%s), without repeating the URL", (url, reason) => {
    const error = refusal(() => chatWebhookPolicy.checkUrl(url));
    expect(error.reason).toBe(reason);
    expect(error.message).not.toContain("TOPSECRET");
    expect(error.message).not.toContain("/hook");
    expect(error.message).not.toContain("s3cr3tpw");
    expect(error.message).not.toContain("alice");
  });

  it("accepts http only where the policy allows it, and never other schemes", () => {
    expect(remoteSources.checkUrl("http://source.internal:9000/v1").port).toBe(9000);
    expect(refusal(() => remoteSources.checkUrl("ftp://source.internal/")).reason).toBe("forbidden_scheme");
  });

  it("returns the host without brackets and the canonical literal", () => {
    expect(chatWebhookPolicy.checkUrl("https://hooks.example.com/x")).toMatchObject({ hostname: "hooks.example.com", port: 443 });
    expect(chatWebhookPolicy.checkUrl("https://[2606:4700:4700:0::1111]:8443/x")).toMatchObject({
      hostname: "2606:4700:4700::1111",
      literalAddress: "2606:4700:4700::1111",
      port: 8443,
    });
  });
});

describe("parseCidrList", () => {
  it("reads a list with spaces, bare addresses and empty entries", () => {
    expect(parseCidrList(" 10.0.0.0/8, fd00::/8 ,192.168.1.5,, 2001:DB8::/32 ")).toEqual(["10.0.0.0/8", "fd00::/8", "192.168.1.5/32", "2001:db8::/32"]);
  });

  it("reads an empty value as an empty list", () => {
    expect(parseCidrList("")).toEqual([]);
    expect(parseCidrList("  ")).toEqual([]);
  });

  it.each([
    ["banana", /Invalid CIDR "banana"/],
    ["10.0.0.0/33", /prefix length must be a whole number from 0 to 32/],
    ["fd00::/129", /from 0 to 128/],
    ["10.0.0.0/", /prefix length/],
    ["10.0.0.0/8/8", /Invalid CIDR/],
    ["10.0.0.1/8", /did you mean 10\.0\.0\.0\/8/],
    ["0x7f.1/8", /dotted decimal/],
    ["2130706433", /dotted decimal/],
    ["fe80::1%eth0/64", /Invalid CIDR/],
    ["10.0.0.0/8, nope", /Invalid CIDR "nope"/],
  ])("rejects %s with a clear message", (value, message) => {
    expect(() => parseCidrList(value)).toThrow(message);
  });
});

import ipaddr from "ipaddr.js";
import { EgressError } from "./egress-error.js";

type IpAddress = ipaddr.IPv4 | ipaddr.IPv6;
type Cidr = [IpAddress, number];

/**
 * What kind of address something is. Everything except `public` is refused
 * unless the policy says otherwise.
 */
export type AddressCategory =
  | "public"
  | "invalid"
  | "unspecified"
  | "loopback"
  | "private"
  | "carrierGradeNat"
  | "linkLocal"
  | "cloudMetadata"
  | "broadcast"
  | "multicast"
  | "reserved"
  | "documentation"
  | "benchmarking"
  | "uniqueLocal"
  | "siteLocal"
  | "discard"
  | "ipv4Mapped"
  | "ipv4Translated"
  | "ipv4Compatible"
  | "nat64"
  | "nat64LocalUse"
  | "6to4"
  | "teredo";

interface SpecialRange {
  category: AddressCategory;
  cidr: Cidr;
}

function cidr(spelled: string): Cidr {
  return ipaddr.parseCIDR(spelled);
}

/**
 * Cloud instance-metadata and platform endpoints. They sit inside ranges that a
 * remote-source policy allows by default (link-local, CGNAT, ULA) or even in
 * public space (Azure's platform endpoint), and they hand out credentials, so
 * they are matched before anything else and only an allow entry that names them
 * specifically unlocks them.
 */
const CLOUD_METADATA_RANGES: SpecialRange[] = [
  "169.254.169.254/32", // AWS, GCP, Azure, OpenStack, Oracle instance metadata
  "169.254.170.2/32", // AWS ECS task credentials
  "169.254.170.23/32", // AWS EKS pod identity
  "100.100.100.200/32", // Alibaba Cloud metadata, inside CGNAT space
  "168.63.129.16/32", // Azure platform endpoint, inside public space
  "fd00:ec2::254/128", // AWS metadata over IPv6
  "fd00:ec2::23/128", // AWS EKS pod identity over IPv6
].map((spelled) => ({ category: "cloudMetadata", cidr: cidr(spelled) }));

/**
 * Our own table rather than only ipaddr.js's `range()`: the categories decide
 * what a policy may allow, so they must not shift with a library upgrade.
 * ipaddr.js's own classification is still consulted afterwards as a second
 * opinion. Order matters: the first match wins, so narrower ranges come first.
 */
const IPV4_SPECIAL_RANGES: SpecialRange[] = (
  [
    ["unspecified", "0.0.0.0/8"],
    ["loopback", "127.0.0.0/8"],
    ["private", "10.0.0.0/8"],
    ["private", "172.16.0.0/12"],
    ["private", "192.168.0.0/16"],
    ["carrierGradeNat", "100.64.0.0/10"],
    ["linkLocal", "169.254.0.0/16"],
    ["reserved", "192.0.0.0/24"],
    ["documentation", "192.0.2.0/24"],
    ["documentation", "198.51.100.0/24"],
    ["documentation", "203.0.113.0/24"],
    ["benchmarking", "198.18.0.0/15"],
    ["reserved", "192.88.99.0/24"], // deprecated 6to4 relay anycast
    ["multicast", "224.0.0.0/4"],
    ["broadcast", "255.255.255.255/32"],
    ["reserved", "240.0.0.0/4"],
  ] as const
).map(([category, spelled]) => ({ category, cidr: cidr(spelled) }));

const IPV6_SPECIAL_RANGES: SpecialRange[] = (
  [
    ["unspecified", "::/128"],
    ["loopback", "::1/128"],
    ["ipv4Mapped", "::ffff:0:0/96"],
    ["ipv4Translated", "::ffff:0:0:0/96"],
    ["ipv4Compatible", "::/96"], // deprecated; some stacks still route it to IPv4
    ["nat64", "64:ff9b::/96"],
    ["nat64LocalUse", "64:ff9b:1::/48"],
    ["discard", "100::/64"],
    ["uniqueLocal", "fc00::/7"],
    ["linkLocal", "fe80::/10"],
    ["siteLocal", "fec0::/10"],
    ["multicast", "ff00::/8"],
    ["teredo", "2001::/32"],
    ["benchmarking", "2001:2::/48"],
    ["reserved", "2001::/23"],
    ["documentation", "2001:db8::/32"],
    ["documentation", "3fff::/20"],
    ["6to4", "2002::/16"],
  ] as const
).map(([category, spelled]) => ({ category, cidr: cidr(spelled) }));

/** All globally routed IPv6 unicast space lives here; anything outside is special. */
const IPV6_GLOBAL_UNICAST = cidr("2000::/3");

/**
 * IPv6 forms that carry an IPv4 address in their last 32 bits and reach that
 * IPv4 host when connected to. They are judged by the address they carry.
 */
const EMBEDS_IPV4: ReadonlySet<AddressCategory> = new Set(["ipv4Mapped", "ipv4Translated", "nat64"]);

/** Ranges an in-cluster or on-premises service normally lives in. */
const PRIVATE_NETWORK_CATEGORIES: ReadonlySet<AddressCategory> = new Set(["private", "carrierGradeNat", "uniqueLocal"]);

/**
 * Categories a broad allow entry such as `0.0.0.0/0` must not unlock: reaching
 * the service's own loopback ports, the "any" address (which connects to
 * loopback) or a metadata endpoint needs an entry that lies inside that range.
 */
const NEEDS_SPECIFIC_ALLOW: ReadonlySet<AddressCategory> = new Set(["loopback", "unspecified", "cloudMetadata"]);

function sameFamily(address: IpAddress, range: Cidr): boolean {
  return address.kind() === range[0].kind();
}

function inRange(address: IpAddress, range: Cidr): boolean {
  // ipaddr.js throws when matching across families; a mismatch is simply "not in it".
  return sameFamily(address, range) && address.match(range);
}

function findSpecialRange(address: IpAddress): SpecialRange | undefined {
  const table = address.kind() === "ipv4" ? IPV4_SPECIAL_RANGES : IPV6_SPECIAL_RANGES;
  return CLOUD_METADATA_RANGES.find((entry) => inRange(address, entry.cidr)) ?? table.find((entry) => inRange(address, entry.cidr));
}

function classifyParsed(address: IpAddress): { category: AddressCategory; range?: Cidr } {
  const special = findSpecialRange(address);
  if (special) return { category: special.category, range: special.cidr };
  if (address.kind() === "ipv6" && !inRange(address, IPV6_GLOBAL_UNICAST)) return { category: "reserved" };
  // Second opinion: anything ipaddr.js knows as special (AS112, AMT, ORCHID…) is not ours to call public.
  if (address.range() !== "unicast") return { category: "reserved" };
  return { category: "public" };
}

function embeddedIpv4(address: ipaddr.IPv6): ipaddr.IPv4 {
  const high = address.parts[6] ?? 0;
  const low = address.parts[7] ?? 0;
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
}

/**
 * Parses one address as a resolver or a URL host hands it over: IPv4 in any
 * spelling ipaddr.js knows, IPv6 with or without brackets or a zone id.
 */
function parseAddress(spelled: string): IpAddress | undefined {
  const unbracketed = spelled.startsWith("[") && spelled.endsWith("]") ? spelled.slice(1, -1) : spelled;
  if (!ipaddr.isValid(unbracketed)) return undefined;
  return ipaddr.parse(unbracketed);
}

/** The category of one address, without any policy applied. */
export function classifyAddress(spelled: string): AddressCategory {
  const parsed = parseAddress(spelled);
  return parsed ? classifyParsed(parsed).category : "invalid";
}

/** True when the text is an IP address literal (any spelling, brackets allowed). */
export function isIpLiteral(spelled: string): boolean {
  return parseAddress(spelled) !== undefined;
}

/** The canonical spelling of an IP literal, without brackets; undefined if it is not one. */
export function canonicalAddress(spelled: string): string | undefined {
  const parsed = parseAddress(spelled);
  if (!parsed) return undefined;
  return parsed.kind() === "ipv6" ? (parsed as ipaddr.IPv6).toRFC5952String() : parsed.toString();
}

function parseCidrEntry(entry: string): string {
  const [addressPart, prefixPart, ...extra] = entry.split("/");
  const example = "such as 10.0.0.0/8, 192.168.1.5 or fd00::/8";
  if (addressPart === undefined || extra.length > 0 || addressPart.includes("%")) {
    throw new Error(`Invalid CIDR "${entry}": expected an address with an optional prefix length, ${example}`);
  }
  // Configuration must be unambiguous: dotted four-part decimal only, no 0x7f.1 or 2130706433.
  const isIpv4 = ipaddr.IPv4.isValidFourPartDecimal(addressPart);
  const isIpv6 = !isIpv4 && ipaddr.IPv6.isValid(addressPart);
  if (!isIpv4 && !isIpv6) {
    throw new Error(`Invalid CIDR "${entry}": "${addressPart}" is not an IPv4 address in dotted decimal or an IPv6 address, ${example}`);
  }
  const maxPrefix = isIpv4 ? 32 : 128;
  let prefix = maxPrefix;
  if (prefixPart !== undefined) {
    if (!/^\d{1,3}$/.test(prefixPart) || Number(prefixPart) > maxPrefix) {
      throw new Error(`Invalid CIDR "${entry}": the prefix length must be a whole number from 0 to ${maxPrefix}`);
    }
    prefix = Number(prefixPart);
  }
  const address = ipaddr.parse(addressPart);
  const network = isIpv4 ? ipaddr.IPv4.networkAddressFromCIDR(`${addressPart}/${prefix}`) : ipaddr.IPv6.networkAddressFromCIDR(`${addressPart}/${prefix}`);
  const canonical = (ip: IpAddress) => (ip.kind() === "ipv6" ? (ip as ipaddr.IPv6).toRFC5952String() : ip.toString());
  // A set host part usually means a typo; say what was probably meant instead of guessing silently.
  if (canonical(network) !== canonical(address)) {
    throw new Error(`Invalid CIDR "${entry}": it has bits set after the prefix; did you mean ${canonical(network)}/${prefix}?`);
  }
  return `${canonical(network)}/${prefix}`;
}

/**
 * Validates a comma-separated CIDR list (as found in configuration) and returns
 * its entries in canonical form. A bare address means that single address.
 * Empty entries are ignored, so an empty string is an empty list.
 * Throws an Error naming the first bad entry.
 */
export function parseCidrList(value: string): string[] {
  return value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0)
    .map(parseCidrEntry);
}

function toCidrs(entries: readonly string[], optionName: string): Cidr[] {
  return entries.map((entry) => {
    try {
      return ipaddr.parseCIDR(parseCidrEntry(entry.trim()));
    } catch (error) {
      throw new Error(`${optionName}: ${(error as Error).message}`);
    }
  });
}

export interface AddressPolicyOptions {
  /** Non-public ranges that may be reached anyway (an on-premises chat server, a test receiver). */
  allowPrivateCidrs: string[];
  /** Ranges that are always refused, even when allowed elsewhere. Checked first. */
  denyCidrs?: string[];
  /** Only `https:` URLs when true; `http:` is also accepted when false. Other schemes never. */
  requireHttps: boolean;
  /**
   * Allow private-network ranges (RFC 1918, CGNAT, IPv6 ULA) without listing them:
   * remote sources normally live inside the cluster. Loopback, link-local,
   * metadata and the other special ranges stay refused.
   */
  allowPrivateByDefault?: boolean;
  /**
   * The names of the settings behind the allow and deny ranges, so a refusal says which one would
   * allow the address (for example REMOTE_SOURCE_ALLOW_CIDRS).
   */
  settings?: { allow?: string; deny?: string };
}

export type VerdictReason = "public" | "explicitly_allowed" | "private_network_allowed" | "denied_by_policy" | "not_public";

export interface AddressVerdict {
  /** The address as judged, in canonical form (or as given when it is not an address). */
  address: string;
  allowed: boolean;
  category: AddressCategory;
  reason: VerdictReason;
  /** For IPv4-mapped, -translated and NAT64 forms: the verdict on the IPv4 address they carry. */
  embeddedIpv4?: AddressVerdict;
}

export interface CheckedUrl {
  url: URL;
  /** The host without IPv6 brackets, as used for SNI, certificate checks and DNS. */
  hostname: string;
  port: number;
  /** Set when the host is an IP literal: its canonical spelling. No DNS is involved then. */
  literalAddress?: string;
}

/**
 * Decides which URLs and addresses an outbound call may reach. One instance per
 * purpose (chat webhooks, remote sources), built from configuration at start.
 */
export class AddressPolicy {
  readonly requireHttps: boolean;
  private readonly allowCidrs: Cidr[];
  private readonly denyCidrs: Cidr[];
  private readonly allowPrivateByDefault: boolean;
  private readonly settings: { allow?: string; deny?: string };

  constructor(options: AddressPolicyOptions) {
    this.settings = options.settings ?? {};
    this.requireHttps = options.requireHttps;
    this.allowCidrs = toCidrs(options.allowPrivateCidrs, "allowPrivateCidrs");
    this.denyCidrs = toCidrs(options.denyCidrs ?? [], "denyCidrs");
    this.allowPrivateByDefault = options.allowPrivateByDefault ?? false;
  }

  /** Judges one address. Anything that does not parse as an address is refused. */
  checkAddress(spelled: string): AddressVerdict {
    const parsed = parseAddress(spelled);
    if (!parsed) return { address: spelled, allowed: false, category: "invalid", reason: "not_public" };
    return this.judge(parsed);
  }

  private judge(address: IpAddress): AddressVerdict {
    const spelled = address.kind() === "ipv6" ? (address as ipaddr.IPv6).toRFC5952String() : address.toString();
    const { category, range } = classifyParsed(address);
    const verdict = (allowed: boolean, reason: VerdictReason): AddressVerdict => ({
      address: spelled,
      allowed,
      category,
      reason,
    });

    if (this.denyCidrs.some((entry) => inRange(address, entry))) return verdict(false, "denied_by_policy");

    if (EMBEDS_IPV4.has(category)) {
      // Connecting to ::ffff:127.0.0.1 or 64:ff9b::7f00:1 reaches 127.0.0.1, so only the
      // carried address counts; an IPv6 allow entry such as ::/0 must not unlock it.
      const inner = this.judge(embeddedIpv4(address as ipaddr.IPv6));
      return { ...verdict(inner.allowed, inner.reason), embeddedIpv4: inner };
    }

    if (this.isExplicitlyAllowed(address, category, range)) return verdict(true, "explicitly_allowed");
    if (category === "public") return verdict(true, "public");

    if (this.allowPrivateByDefault && PRIVATE_NETWORK_CATEGORIES.has(category)) {
      return verdict(true, "private_network_allowed");
    }
    return verdict(false, "not_public");
  }

  private isExplicitlyAllowed(address: IpAddress, category: AddressCategory, range: Cidr | undefined): boolean {
    return this.allowCidrs.some((entry) => {
      if (!inRange(address, entry)) return false;
      if (!NEEDS_SPECIFIC_ALLOW.has(category) || !range) return true;
      // The allow entry must lie inside the sensitive range itself.
      return entry[1] >= range[1] && inRange(entry[0], range);
    });
  }

  /**
   * Checks what can be checked without DNS: a parseable absolute URL, an
   * allowed scheme, no embedded credentials, and, for an IP literal in any
   * spelling, the address itself. Throws EgressError; the message never
   * repeats the URL.
   */
  checkUrl(spelled: string): CheckedUrl {
    let url: URL;
    try {
      url = new URL(spelled);
    } catch {
      // The URL parser's error carries the input; do not let it travel.
      throw new EgressError("invalid_url", "The URL is not a valid absolute URL");
    }
    const allowedSchemes = this.requireHttps ? ["https:"] : ["https:", "http:"];
    if (!allowedSchemes.includes(url.protocol)) {
      throw new EgressError(
        "forbidden_scheme",
        `The URL scheme "${url.protocol.replace(/:$/, "")}" is not allowed; use ${allowedSchemes.map((scheme) => scheme.replace(/:$/, "")).join(" or ")}`,
        { host: url.hostname },
      );
    }
    if (url.username !== "" || url.password !== "") {
      throw new EgressError("forbidden_userinfo", "The URL must not contain a user name or password", {
        host: url.hostname,
      });
    }
    // The WHATWG parser already turns 2130706433, 0177.0.0.1, 0x7f.1 and 127.1 into
    // 127.0.0.1; ipaddr.js is asked as well so no other spelling slips through as a "name".
    const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    if (hostname === "") throw new EgressError("invalid_url", "The URL has no host");
    const port = url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port);
    const literalAddress = canonicalAddress(hostname);
    if (literalAddress === undefined) return { url, hostname, port };

    const verdict = this.checkAddress(literalAddress);
    if (!verdict.allowed) throw this.refusal(hostname, verdict);
    return { url, hostname: literalAddress, port, literalAddress };
  }

  /** The error for a refused address, naming the setting that would allow it. */
  refusal(hostname: string, verdict: AddressVerdict): EgressError {
    return forbiddenAddressError(hostname, verdict, this.settings);
  }
}

/**
 * The address policy of one purpose (chat webhooks, remote sources), built from its allow and deny
 * ranges.
 */
export function createAddressPolicy(options: AddressPolicyOptions): AddressPolicy {
  return new AddressPolicy(options);
}

const CATEGORY_WORDS: Record<AddressCategory, string> = {
  public: "a public address",
  invalid: "not an IP address",
  unspecified: 'the unspecified ("any") address',
  loopback: "a loopback address",
  private: "an RFC 1918 private address",
  carrierGradeNat: "a carrier-grade NAT address",
  linkLocal: "a link-local address",
  cloudMetadata: "a cloud metadata endpoint",
  broadcast: "the broadcast address",
  multicast: "a multicast address",
  reserved: "a reserved address",
  documentation: "a documentation address",
  benchmarking: "a benchmarking address",
  uniqueLocal: "an IPv6 unique local address",
  siteLocal: "an IPv6 site-local address",
  discard: "an IPv6 discard-prefix address",
  ipv4Mapped: "an IPv4-mapped IPv6 address",
  ipv4Translated: "an IPv4-translated IPv6 address",
  ipv4Compatible: "an IPv4-compatible IPv6 address",
  nat64: "a NAT64 address",
  nat64LocalUse: "a local-use NAT64 address",
  "6to4": "a 6to4 address",
  teredo: "a Teredo address",
};

/** Says in words what an address is, naming the IPv4 address inside a mapped form. */
export function describeVerdict(verdict: AddressVerdict): string {
  const inner = verdict.embeddedIpv4;
  if (inner) return `${verdict.address}, ${CATEGORY_WORDS[verdict.category]} of ${describeVerdict(inner)}`;
  if (verdict.reason === "denied_by_policy") return `${verdict.address}, in a denied range`;
  return `${verdict.address}, ${CATEGORY_WORDS[verdict.category]}`;
}

/**
 * Says in words what kind of address it is, without the address: for a host name, the address it
 * resolves to is the caller's to know only as a kind, or errors would map internal DNS.
 */
export function describeKind(verdict: AddressVerdict): string {
  const inner = verdict.embeddedIpv4;
  if (inner) return `${CATEGORY_WORDS[verdict.category]} of ${describeKind(inner)}`;
  if (verdict.reason === "denied_by_policy") return "an address in a denied range";
  return CATEGORY_WORDS[verdict.category];
}

/**
 * The error for a refused address; `hostname` is the URL's host, a name or the literal itself. An
 * address the caller wrote is named; one a host name resolves to is described by its kind only.
 */
export function forbiddenAddressError(hostname: string, verdict: AddressVerdict, settings: { allow?: string; deny?: string } = {}): EgressError {
  const message = isIpLiteral(hostname)
    ? `Refused outbound address ${describeVerdict(verdict)}`
    : `Refused outbound host ${hostname}: it resolves to ${describeKind(verdict)}`;
  return new EgressError("forbidden_address", `${message}${allowHint(verdict, settings)}`, { host: hostname });
}

/** What would allow a refused address: the deny setting naming its range, else the allow setting. */
function allowHint(verdict: AddressVerdict, settings: { allow?: string; deny?: string }): string {
  const denied = verdict.reason === "denied_by_policy" || verdict.embeddedIpv4?.reason === "denied_by_policy";
  if (denied) return settings.deny ? `; to allow it, take its range out of ${settings.deny}` : "";
  return settings.allow ? `; to allow it, add its range to ${settings.allow}` : "";
}

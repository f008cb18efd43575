import { describe, expect, it } from "vitest";
import { createClientAddress } from "./client-address.js";

describe("a request's client address", () => {
  const clients = createClientAddress(["10.0.0.0/8", "fd00::/8"]);

  it("is the socket peer when the peer is no trusted proxy, whatever the forwarding header says", () => {
    expect(clients.resolve("192.0.2.7", undefined)).toBe("192.0.2.7");
    expect(clients.resolve("192.0.2.7", "198.51.100.1")).toBe("192.0.2.7");
    expect(clients.resolve("::ffff:192.0.2.7", "198.51.100.1")).toBe("192.0.2.7");
    expect(clients.resolve("2001:db8::1", undefined)).toBe("2001:db8::1");
  });

  it("is the right-most address of the chain that is not a trusted proxy, behind a trusted peer", () => {
    expect(clients.resolve("10.1.2.3", "198.51.100.1, 10.0.0.9")).toBe("198.51.100.1");
    expect(clients.resolve("10.1.2.3", ["203.0.113.5, 198.51.100.1", "10.0.0.9"])).toBe("198.51.100.1");
    expect(clients.resolve("fd00::1", "2001:db8::7")).toBe("2001:db8::7");
    expect(clients.resolve("10.1.2.3", undefined)).toBe("10.1.2.3");
    // An address the chain cannot parse ends the walk at the last good hop.
    expect(clients.resolve("10.1.2.3", "198.51.100.1, not-an-address, 10.0.0.9")).toBe("10.0.0.9");
  });

  it("answers the same for a peer seen before, and for a peer it cannot parse", () => {
    for (let i = 0; i < 3; i++) {
      expect(clients.resolve("10.1.2.3", `198.51.100.${i}`)).toBe(`198.51.100.${i}`);
      expect(clients.resolve("192.0.2.7", `198.51.100.${i}`)).toBe("192.0.2.7");
      expect(clients.resolve("not-an-address", undefined)).toBe("not-an-address");
    }
    expect(clients.resolve(undefined, "198.51.100.1")).toBe("");
  });

  it("tells a trusted proxy's connections from a client's", () => {
    expect(clients.isTrustedProxy("10.9.9.9")).toBe(true);
    expect(clients.isTrustedProxy("::ffff:10.9.9.9")).toBe(true);
    expect(clients.isTrustedProxy("192.0.2.7")).toBe(false);
    expect(clients.isTrustedProxy(undefined)).toBe(false);
    expect(clients.isTrustedProxy("not-an-address")).toBe(false);
  });

  it("keeps answering right past its memory of peers", () => {
    for (let i = 0; i < 10_000; i++) expect(clients.resolve(`192.0.${i >> 8}.${i & 255}`, "198.51.100.1")).toBe(`192.0.${i >> 8}.${i & 255}`);
    expect(clients.isTrustedProxy("10.9.9.9")).toBe(true);
  });
});

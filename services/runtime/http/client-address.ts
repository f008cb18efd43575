import ipaddr from "ipaddr.js";

/**
 * The address of the client a request comes from, as the services see it: the public port writes
 * it into `x-forwarded-for` (one address) in place of whatever the caller sent, so limits and audit
 * records cannot be pointed at an address of the caller's choosing. A forwarding header is read only
 * from a peer inside `TRUSTED_PROXY_CIDRS`; the client is then the right-most address of the chain
 * that is not itself a trusted proxy.
 */
export const CLIENT_ADDRESS_HEADER = "x-forwarded-for";

type Range = [ipaddr.IPv4 | ipaddr.IPv6, number];

/** Socket peers whose parse is remembered: one connection's requests parse its peer once. */
const PEERS_REMEMBERED = 4096;

function parse(address: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  const bare = address.trim().replace(/^\[(.*)\](?::\d+)?$/, "$1");
  if (!ipaddr.isValid(bare)) return undefined;
  const parsed = ipaddr.parse(bare);
  return parsed.kind() === "ipv6" && (parsed as ipaddr.IPv6).isIPv4MappedAddress() ? (parsed as ipaddr.IPv6).toIPv4Address() : parsed;
}

/**
 * Resolves a request's client address: the socket peer, or the forwarding header's address when the
 * peer is one of `trustedProxyCidrs`.
 */
export function createClientAddress(trustedProxyCidrs: readonly string[]) {
  const ranges: Range[] = trustedProxyCidrs.map((cidr) => {
    const [address, bits] = ipaddr.parseCIDR(cidr);
    return [address.kind() === "ipv6" && (address as ipaddr.IPv6).isIPv4MappedAddress() ? (address as ipaddr.IPv6).toIPv4Address() : address, bits] as Range;
  });
  const trusted = (address: ipaddr.IPv4 | ipaddr.IPv6) => ranges.some(([range, bits]) => range.kind() === address.kind() && address.match(range, bits));
  // A connection's peer is the same for every request on it: its parse is remembered (null when it
  // does not parse), for at most PEERS_REMEMBERED peers; past that the memory starts afresh.
  const peers = new Map<string, { address: string; trusted: boolean } | null>();
  const peerOf = (peer: string) => {
    let known = peers.get(peer);
    if (known === undefined) {
      const parsed = parse(peer);
      known = parsed ? { address: parsed.toString(), trusted: trusted(parsed) } : null;
      if (peers.size >= PEERS_REMEMBERED) peers.clear();
      peers.set(peer, known);
    }
    return known;
  };
  return {
    /** Whether a socket peer is a trusted proxy (whose connections carry many clients). */
    isTrustedProxy(peer: string | undefined): boolean {
      return peer ? (peerOf(peer)?.trusted ?? false) : false;
    },
    /** The client of a request whose socket peer is `peer` and whose forwarding header is `forwarded`. */
    resolve(peer: string | undefined, forwarded: string | string[] | undefined): string {
      const socket = peer ? peerOf(peer) : null;
      if (!socket) return peer ?? "";
      if (!socket.trusted || forwarded === undefined) return socket.address;
      const chain = (Array.isArray(forwarded) ? forwarded.join(",") : forwarded)
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean);
      let client = socket.address;
      for (let i = chain.length - 1; i >= 0; i--) {
        const hop = parse(chain[i]!);
        if (!hop) break;
        client = hop.toString();
        if (!trusted(hop)) break;
      }
      return client;
    },
  };
}

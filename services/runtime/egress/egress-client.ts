import { promises as dnsPromises } from "node:dns";
import type { LookupAddress, LookupOptions } from "node:dns";
import http from "node:http";
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from "node:http";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
import type { AddressPolicy } from "./address-policy.js";
import { EgressError } from "./egress-error.js";

/** Every address a host name resolves to. Injectable so tests never touch real DNS. */
export type HostResolver = (hostname: string) => Promise<string[]>;

/** Resolves a host name through the system's resolver (getaddrinfo), every address it gives. */
export const systemResolver: HostResolver = async (hostname) => {
  const answers = await dnsPromises.lookup(hostname, { all: true, verbatim: true });
  return answers.map((answer) => answer.address);
};

export interface EgressClientOptions {
  policy: AddressPolicy;
  resolver?: HostResolver;
  /** Budget for the whole call: resolution, connect, TLS, request and the full response. */
  timeoutMs: number;
  /** Response bodies are cut here; nothing beyond it is ever kept in memory. */
  maxResponseBytes: number;
  /** An extra trusted CA (PEM), added to the system roots, e.g. for an on-premises chat server. */
  ca?: string | Buffer;
  /**
   * Keep connections open between calls for this long when idle (0 or absent: a new connection
   * per call). A kept connection belongs to one host, port and pinned address: every call still
   * resolves and vets the name, and only reuses a connection to the very address it vetted; a
   * name that resolves elsewhere, or is refused, closes its kept connections at once.
   */
  keepAliveMs?: number;
  /** Connections at once to one pinned address when keeping them alive (default 16). */
  maxSocketsPerPin?: number;
}

export interface EgressRequest {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Client certificate and key (PEM) for mutual TLS. */
  clientCert?: string | Buffer;
  clientKey?: string | Buffer;
  /** An extra trusted CA for this call only, added to the client's. */
  ca?: string | Buffer;
  /** This call's budget, when it differs from the client's `timeoutMs` (a read's remaining budget). */
  timeoutMs?: number;
}

export interface EgressResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** True when the body was longer than maxResponseBytes and was cut. */
  truncated: boolean;
}

/** A URL whose every resolved address passed the policy, and the one address to connect to. */
export interface VettedTarget {
  url: URL;
  hostname: string;
  port: number;
  /** The address the connection is pinned to. */
  address: string;
  family: 4 | 6;
  /** Every address the host resolved to, all of them allowed. */
  addresses: string[];
}

export interface EgressClient {
  /** Checks a URL as a send would, without connecting: for when a URL is saved. */
  vet(url: string): Promise<VettedTarget>;
  /**
   * One request to a vetted address. Redirects are returned, never followed:
   * a 3xx is an answer like any other, and its Location is not trusted.
   */
  request(request: EgressRequest): Promise<EgressResponse>;
  /** Connections kept open for reuse (always 0 without keep-alive). */
  pooledConnections(): number;
  /** Closes every kept connection; later calls open new ones. */
  close(): void;
}

/** Kept connections of one host, port and pinned address. */
interface PinnedPool {
  target: string;
  address: string;
  agent: http.Agent;
}

/** At most this many pinned pools per client; the least recently used one is closed beyond it. */
const MAX_PINNED_POOLS = 256;

const TLS_ERROR_CODES = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "ERR_TLS_HANDSHAKE_TIMEOUT",
  "EPROTO",
]);

function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** Turns a low-level failure into an EgressError without copying its message, which may quote the URL. */
function connectionError(error: unknown, hostname: string): EgressError {
  if (error instanceof EgressError) return error;
  const code = errorCode(error);
  if (code !== undefined && (TLS_ERROR_CODES.has(code) || code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_"))) {
    return new EgressError("tls", `TLS with ${hostname} failed (${code})`, { host: hostname, code });
  }
  const suffix = code === undefined ? "" : ` (${code})`;
  return new EgressError("network", `The connection to ${hostname} failed${suffix}`, {
    host: hostname,
    ...(code === undefined ? {} : { code }),
  });
}

function timeoutError(hostname: string | undefined, timeoutMs: number): EgressError {
  const target = hostname === undefined ? "The outbound call" : `The call to ${hostname}`;
  return new EgressError("timeout", `${target} took longer than ${timeoutMs} ms`, {
    ...(hostname === undefined ? {} : { host: hostname }),
  });
}

/**
 * A `lookup` for node:net that always answers with the vetted address. The
 * socket is given the original host name (so SNI, certificate checks and the
 * Host header stay right) but can only ever reach this address: a second DNS
 * answer, as in DNS rebinding, is never asked for.
 */
function pinnedLookup(address: string, family: 4 | 6) {
  return (
    _hostname: string,
    options: LookupOptions,
    callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    if (options.all) callback(null, [{ address, family }]);
    else callback(null, address, family);
  };
}

function trustedCas(...extra: Array<string | Buffer | undefined>): Array<string | Buffer> | undefined {
  const added = extra.filter((ca): ca is string | Buffer => ca !== undefined);
  // Node's `ca` replaces the system roots; an extra CA must add to them instead.
  return added.length === 0 ? undefined : [...tls.rootCertificates, ...added];
}

function withoutHostHeader(headers: Record<string, string> | undefined): OutgoingHttpHeaders {
  const kept: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    // The Host header would also steer SNI and the certificate check; it always follows the URL.
    if (name.toLowerCase() !== "host") kept[name] = value;
  }
  return kept;
}

/**
 * The HTTP client for outbound calls: vets the URL and every address it resolves to against the
 * policy, pins the connection to a vetted address, and keeps the whole call within its time and
 * size budget.
 */
export function createEgressClient(options: EgressClientOptions): EgressClient {
  const { policy, timeoutMs, maxResponseBytes } = options;
  const resolve = options.resolver ?? systemResolver;
  const keepAliveMs = options.keepAliveMs ?? 0;
  /** Keyed by scheme, host, port and pinned address; insertion order is recency. */
  const pools = new Map<string, PinnedPool>();
  /**
   * The client's trust (the system roots and its extra CA) parsed once. Built from a `ca` list,
   * each new connection parsed every root again: 65 ms of CPU on a busy machine, paid on each
   * attempt to a receiver that drops its connections. Absent without an extra CA (Node's default
   * context shares its roots already).
   */
  const clientTrust = options.ca === undefined ? undefined : tls.createSecureContext({ ca: trustedCas(options.ca) });

  const targetOf = (url: URL, hostname: string, port: number) => `${url.protocol}//${hostname}:${port}`;

  /** Closes the kept connections of a host and port, except those to `keep` (the address just vetted). */
  function dropPins(target: string, keep?: string): void {
    for (const [key, pool] of pools) {
      if (pool.target === target && pool.address !== keep) {
        pools.delete(key);
        pool.agent.destroy();
      }
    }
  }

  function pooledAgent(vetted: VettedTarget): http.Agent {
    const { url, hostname, port, address, family } = vetted;
    const target = targetOf(url, hostname, port);
    const key = `${target}@${address}`;
    const existing = pools.get(key);
    if (existing) {
      pools.delete(key);
      pools.set(key, existing);
      return existing.agent;
    }
    const isHttps = url.protocol === "https:";
    const agentOptions: https.AgentOptions = {
      keepAlive: true,
      // An idle kept connection closes after this (the agent's socket timeout on a free socket).
      timeout: keepAliveMs,
      maxSockets: options.maxSocketsPerPin ?? 16,
      maxFreeSockets: options.maxSocketsPerPin ?? 16,
      scheduling: "lifo",
      lookup: pinnedLookup(address, family),
    };
    if (isHttps) {
      if (!net.isIP(hostname)) agentOptions.servername = hostname;
      if (clientTrust) agentOptions.secureContext = clientTrust;
    }
    const agent = isHttps ? new https.Agent(agentOptions) : new http.Agent(agentOptions);
    // Every new connection of the pool checks its address again before connecting.
    const connect = agent.createConnection.bind(agent) as (...args: unknown[]) => net.Socket;
    agent.createConnection = ((...args: unknown[]) => {
      const verdict = policy.checkAddress(address);
      if (!verdict.allowed) throw policy.refusal(hostname, verdict);
      return connect(...args);
    }) as typeof agent.createConnection;
    pools.set(key, { target, address, agent });
    if (pools.size > MAX_PINNED_POOLS) {
      const [oldestKey, oldest] = pools.entries().next().value as [string, PinnedPool];
      pools.delete(oldestKey);
      oldest.agent.destroy();
    }
    return agent;
  }

  /** Vets a URL and keeps the kept connections in step: only the address just vetted keeps its own. */
  async function vetAndPin(spelledUrl: string): Promise<VettedTarget> {
    if (pools.size === 0) return vet(spelledUrl);
    let vetted: VettedTarget;
    try {
      vetted = await vet(spelledUrl);
    } catch (error) {
      const target = targetOfSpelled(spelledUrl);
      if (target !== undefined) dropPins(target);
      throw error;
    }
    dropPins(targetOf(vetted.url, vetted.hostname, vetted.port), vetted.address);
    return vetted;
  }

  function targetOfSpelled(spelledUrl: string): string | undefined {
    try {
      const { url, hostname, port } = policy.checkUrl(spelledUrl);
      return targetOf(url, hostname, port);
    } catch {
      return undefined;
    }
  }

  async function vet(spelledUrl: string): Promise<VettedTarget> {
    const checked = policy.checkUrl(spelledUrl);
    const { url, hostname, port } = checked;
    let addresses: string[];
    if (checked.literalAddress !== undefined) {
      addresses = [checked.literalAddress];
    } else {
      try {
        addresses = await resolve(hostname);
      } catch (error) {
        const code = errorCode(error);
        throw new EgressError("resolution_failed", `Could not resolve ${hostname}${code ? ` (${code})` : ""}`, {
          host: hostname,
          ...(code === undefined ? {} : { code }),
        });
      }
    }
    if (addresses.length === 0) {
      throw new EgressError("resolution_failed", `Could not resolve ${hostname} (no addresses)`, { host: hostname });
    }
    // Every answer must pass: a client library may pick any of them, and an
    // attacker only needs one private address among public ones.
    const verdicts = addresses.map((address) => policy.checkAddress(address));
    const refused = verdicts.find((verdict) => !verdict.allowed);
    if (refused) throw policy.refusal(hostname, refused);
    const first = verdicts[0]!;
    const family = net.isIPv6(first.address) ? 6 : 4;
    return { url, hostname, port, address: first.address, family, addresses: verdicts.map((verdict) => verdict.address) };
  }

  function send(target: VettedTarget, request: EgressRequest, signal: AbortSignal): Promise<EgressResponse> {
    const { url, hostname, port, address, family } = target;
    const isHttps = url.protocol === "https:";
    const body = request.body === undefined ? undefined : Buffer.from(request.body);
    const headers = withoutHostHeader(request.headers);
    if (body !== undefined) headers["content-length"] = String(body.length);

    // A call with TLS material of its own never shares a connection; nor does any call without keep-alive.
    const ownTls = request.clientCert !== undefined || request.clientKey !== undefined || request.ca !== undefined;
    const pooled = keepAliveMs > 0 && !ownTls;
    const requestOptions: https.RequestOptions & Pick<tls.ConnectionOptions, "secureContext"> = {
      hostname,
      port,
      path: `${url.pathname}${url.search}`,
      method: request.method ?? "GET",
      headers,
      // Without keep-alive, a fresh connection per call: no pooled socket from another call, no shared TLS options.
      agent: pooled ? pooledAgent(target) : false,
      lookup: pinnedLookup(address, family),
    };
    if (isHttps) {
      // SNI is only for names; an IP literal is checked against the certificate's IP entries.
      if (!net.isIP(hostname)) requestOptions.servername = hostname;
      if (ownTls) {
        // TLS material of its own: a context of its own, built for this call.
        const ca = trustedCas(options.ca, request.ca);
        if (ca) requestOptions.ca = ca;
      } else if (clientTrust) requestOptions.secureContext = clientTrust;
      if (request.clientCert !== undefined) requestOptions.cert = request.clientCert;
      if (request.clientKey !== undefined) requestOptions.key = request.clientKey;
    }

    return new Promise<EgressResponse>((resolvePromise, rejectPromise) => {
      let settled = false;
      const finish = (outcome: () => void) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", onAbort);
        outcome();
      };
      let answered = false;
      const fail = (error: unknown) =>
        finish(() => {
          const failure = connectionError(error, hostname);
          // Nothing came back on a kept connection the receiver had just closed: safe to send again.
          const lostReused = !answered && outgoing?.reusedSocket === true && !signal.aborted && !(error instanceof EgressError);
          rejectPromise(lostReused ? new ReusedConnectionLost(failure) : failure);
        });

      let outgoing: http.ClientRequest;
      try {
        outgoing = (isHttps ? https : http).request(requestOptions, onResponse);
      } catch (error) {
        // Bad header values and the like throw before any connection exists.
        const code = errorCode(error);
        finish(() =>
          rejectPromise(
            new EgressError("invalid_request", `The request to ${hostname} could not be built${code ? ` (${code})` : ""}`, {
              host: hostname,
              ...(code === undefined ? {} : { code }),
            }),
          ),
        );
        return;
      }
      // Attached before anything can destroy the request, so no error goes unhandled.
      outgoing.on("error", fail);

      function onResponse(response: IncomingMessage) {
        answered = true;
        const chunks: Buffer[] = [];
        let received = 0;
        const done = (truncated: boolean) =>
          finish(() =>
            resolvePromise({
              status: response.statusCode ?? 0,
              headers: response.headers,
              body: Buffer.concat(chunks, received),
              truncated,
            }),
          );
        response.on("data", (chunk: Buffer) => {
          if (settled) return;
          const room = maxResponseBytes - received;
          if (chunk.length <= room) {
            chunks.push(chunk);
            received += chunk.length;
            return;
          }
          if (room > 0) {
            // A copy, so the oversized chunk itself is not kept alive by the slice.
            chunks.push(Buffer.from(chunk.subarray(0, room)));
            received += room;
          }
          done(true);
          // Stop reading: the rest is never wanted, and a hostile server may send forever.
          outgoing.destroy();
        });
        response.on("end", () => done(false));
        response.on("error", fail);
        response.on("close", () => {
          if (!response.complete) fail(Object.assign(new Error("response cut short"), { code: "ECONNRESET" }));
        });
      }

      function onAbort() {
        const reason: unknown = signal.reason;
        fail(reason instanceof EgressError ? reason : timeoutError(hostname, timeoutMs));
        outgoing.destroy();
      }
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener("abort", onAbort);
      outgoing.end(body);
    });
  }

  return {
    vet,
    pooledConnections() {
      let count = 0;
      for (const pool of pools.values()) {
        for (const sockets of [pool.agent.sockets, pool.agent.freeSockets]) {
          for (const list of Object.values(sockets)) count += list?.length ?? 0;
        }
      }
      return count;
    },
    close() {
      for (const pool of pools.values()) pool.agent.destroy();
      pools.clear();
    },
    async request(request) {
      const controller = new AbortController();
      const hostname = hostnameForMessages(request.url);
      const budgetMs = request.timeoutMs ?? timeoutMs;
      const timer = setTimeout(() => controller.abort(timeoutError(hostname, budgetMs)), budgetMs);
      const abandoned = new Promise<never>((_, reject) => {
        controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true });
      });
      // Only the race below listens to this; once the race is over its rejection is moot.
      abandoned.catch(() => undefined);
      try {
        // Resolution is inside the time budget too; a stalled resolver is abandoned, not awaited.
        const target = await Promise.race([vetAndPin(request.url), abandoned]);
        try {
          return await send(target, request, controller.signal);
        } catch (error) {
          // A kept connection the receiver closed as it was reused: once more, on a new connection.
          if (error instanceof ReusedConnectionLost && !controller.signal.aborted) return await send(target, request, controller.signal);
          throw error instanceof ReusedConnectionLost ? error.cause : error;
        }
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** A kept connection lost before any answer came on it. */
class ReusedConnectionLost extends Error {
  constructor(override readonly cause: EgressError) {
    super(cause.message);
  }
}

function hostnameForMessages(spelledUrl: string): string | undefined {
  try {
    return new URL(spelledUrl).hostname;
  } catch {
    return undefined;
  }
}

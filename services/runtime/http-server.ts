import http, { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import http2, { type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import { readFileSync } from "node:fs";
import net, { type AddressInfo, type Socket } from "node:net";
import { Duplex } from "node:stream";

export type HttpHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;

export interface HttpServer {
  port: number;
  /** Stops accepting, waits for in-flight requests up to `graceMs`, then closes what is left. */
  close(graceMs: number): Promise<void>;
}

const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0");

/**
 * How long a connection may take over each phase before it is closed. The port faces the internet:
 * a connection that sends nothing, or drips, holds a file descriptor, and enough of them stop every
 * other client's requests.
 */
export interface ConnectionDeadlines {
  /** From accept to the first byte. */
  firstByteMs: number;
  /** From the first byte of a request to the end of its headers; also the HTTP/2 preface and first SETTINGS. */
  headersMs: number;
  /** From the first byte of a request to the end of its body. */
  bodyMs: number;
  /** HTTP/1.1: idle between requests on a kept-alive connection. */
  keepAliveMs: number;
  /** HTTP/2: time a session may stay with no open stream. */
  http2IdleMs: number;
}

export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 256;

export const DEFAULT_CONNECTION_DEADLINES: ConnectionDeadlines = {
  firstByteMs: 10_000,
  headersMs: 20_000,
  bodyMs: 60_000,
  keepAliveMs: 65_000,
  http2IdleMs: 65_000,
};

/**
 * How many connections the port holds at once: below the process's open-file limit, so the process
 * never runs out of descriptors (then the kernel resets every waiting connection, a healthy client's
 * too) and keeps some for its database, bus and files. Unknown limit: only the configured cap.
 */
export function defaultMaxConnections(configured: number | undefined): number {
  if (configured !== undefined) return configured;
  let soft = Number.POSITIVE_INFINITY;
  try {
    const line = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    if (line && line[1] !== "unlimited") soft = Number(line[1]);
  } catch {
    // Not Linux: no limit read, none applied.
  }
  return Number.isFinite(soft) ? Math.max(16, Math.floor(soft * 0.75) - 64) : 100_000;
}

/** The deadlines from the configuration's seconds. */
export function connectionDeadlines(config: {
  HTTP_FIRST_BYTE_TIMEOUT_SECONDS: number;
  HTTP_HEADERS_TIMEOUT_SECONDS: number;
  HTTP_BODY_TIMEOUT_SECONDS: number;
  HTTP_KEEPALIVE_TIMEOUT_SECONDS: number;
  HTTP2_IDLE_TIMEOUT_SECONDS: number;
}): ConnectionDeadlines {
  return {
    firstByteMs: config.HTTP_FIRST_BYTE_TIMEOUT_SECONDS * 1000,
    headersMs: config.HTTP_HEADERS_TIMEOUT_SECONDS * 1000,
    bodyMs: config.HTTP_BODY_TIMEOUT_SECONDS * 1000,
    keepAliveMs: config.HTTP_KEEPALIVE_TIMEOUT_SECONDS * 1000,
    http2IdleMs: config.HTTP2_IDLE_TIMEOUT_SECONDS * 1000,
  };
}

/**
 * One port for HTTP/1.1 and cleartext HTTP/2 (gRPC without TLS): the first bytes of a connection
 * tell the two apart, and the socket is handed to the matching server.
 */
/**
 * HTTP/2 reads a net.Socket's handle natively, past any bytes put back with unshift(); a plain
 * stream that replays the sniffed bytes first is read through JavaScript instead.
 */
function replayingStream(socket: Socket, first: Buffer): Duplex {
  const stream = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk, encoding, callback) {
      socket.write(chunk, encoding, callback);
    },
    final(callback) {
      socket.end(callback);
    },
    destroy(err, callback) {
      socket.destroy(err ?? undefined);
      callback(err);
    },
  });
  stream.push(first);
  socket.on("data", (data) => {
    if (!stream.push(data)) socket.pause();
  });
  socket.on("end", () => stream.push(null));
  socket.on("close", () => stream.destroy());
  socket.on("error", (err) => stream.destroy(err));
  Object.defineProperties(stream, {
    remoteAddress: { get: () => socket.remoteAddress },
    remotePort: { get: () => socket.remotePort },
    remoteFamily: { get: () => socket.remoteFamily },
    localAddress: { get: () => socket.localAddress },
    localPort: { get: () => socket.localPort },
  });
  socket.resume();
  return stream;
}

/**
 * Listens on host and port with `handler`, serving HTTP/1.1 and h2c on the one port; the server it
 * resolves with counts requests in flight and closes after they end.
 */
export async function listenHttp(options: {
  host: string;
  port: number;
  handler: HttpHandler;
  deadlines?: Partial<ConnectionDeadlines>;
  /** Connections held at once; more are closed as they arrive. Default: from the open-file limit. */
  maxConnections?: number;
  /** Connections one peer address may hold at once (one client cannot take every slot). */
  maxConnectionsPerAddress?: number;
  /** Peers exempt from the per-address cap: trusted proxies, which carry many clients. */
  isTrustedProxy?: (address: string | undefined) => boolean;
}): Promise<HttpServer> {
  const deadlines = { ...DEFAULT_CONNECTION_DEADLINES, ...options.deadlines };
  const maxConnections = defaultMaxConnections(options.maxConnections);
  const maxPerAddress = options.maxConnectionsPerAddress ?? DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
  const perAddress = new Map<string, number>();
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const tracked: HttpHandler = (req, res) => {
    inFlight++;
    res.on("close", () => {
      inFlight--;
      if (inFlight === 0) idle?.();
    });
    if ("stream" in req) {
      // node:http enforces bodyMs on HTTP/1.1 (requestTimeout); an HTTP/2 stream gets its own timer,
      // counted like it from the request's start, so a body dripped a byte at a time ends too.
      const stream = req.stream;
      const timer = setTimeout(() => {
        // The peer's half is done when it ended the stream, whether or not the handler read the body.
        const state = stream.destroyed ? undefined : stream.state.state;
        const received =
          stream.endAfterHeaders ||
          req.complete ||
          state === http2.constants.NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE ||
          state === http2.constants.NGHTTP2_STREAM_STATE_CLOSED;
        if (!received && !stream.destroyed) {
          if (!res.headersSent) sendJson(res, 408, { error: "request body not received in time" });
          stream.close(http2.constants.NGHTTP2_CANCEL);
        }
      }, deadlines.bodyMs);
      timer.unref();
      req.once("end", () => clearTimeout(timer));
      res.once("close", () => clearTimeout(timer));
    }
    options.handler(req, res);
  };
  const h1 = http.createServer(
    {
      keepAliveTimeout: deadlines.keepAliveMs,
      headersTimeout: deadlines.headersMs,
      requestTimeout: Math.max(deadlines.bodyMs, deadlines.headersMs),
      connectionsCheckingInterval: Math.min(1000, Math.max(100, Math.floor(deadlines.headersMs / 4))),
    },
    tracked,
  );
  // node:http checks headersTimeout and requestTimeout on a timer it starts on "listening"; this
  // server never listens (the net.Server below hands it sockets), so the timer is started here.
  h1.emit("listening");
  // No more streams at once than a client needs: each holds memory until its body or deadline ends.
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: 100 } }, tracked);
  const sockets = new Set<Socket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    // The preface and the client's first SETTINGS must arrive within headersMs; after that the
    // session may idle (no open stream) for http2IdleMs. A stream being served (a streaming RPC,
    // server-sent events) keeps it open: those have their own heartbeats.
    let open = 0;
    let timer: NodeJS.Timeout | undefined = setTimeout(() => session.destroy(), deadlines.headersMs).unref();
    const arm = () => {
      clearTimeout(timer);
      // close() waits for open streams; there are none, so a peer that never answers GOAWAY is cut.
      timer = setTimeout(() => {
        session.close();
        setTimeout(() => session.destroy(), 1000).unref();
      }, deadlines.http2IdleMs).unref();
    };
    session.once("remoteSettings", () => {
      if (open === 0) arm();
    });
    session.on("stream", (stream) => {
      open++;
      clearTimeout(timer);
      timer = undefined;
      stream.once("close", () => {
        open--;
        if (open === 0 && !session.destroyed) arm();
      });
    });
    session.on("close", () => {
      clearTimeout(timer);
      sessions.delete(session);
    });
  });
  const server = net.createServer((socket) => {
    const peer = socket.remoteAddress ?? "";
    const held = perAddress.get(peer) ?? 0;
    if (sockets.size >= maxConnections || (held >= maxPerAddress && !options.isTrustedProxy?.(peer))) {
      socket.destroy();
      return;
    }
    perAddress.set(peer, held + 1);
    sockets.add(socket);
    socket.on("close", () => {
      sockets.delete(socket);
      const left = (perAddress.get(peer) ?? 1) - 1;
      if (left <= 0) perAddress.delete(peer);
      else perAddress.set(peer, left);
    });
    socket.on("error", () => socket.destroy());
    const firstByte = setTimeout(() => socket.destroy(), deadlines.firstByteMs).unref();
    socket.once("close", () => clearTimeout(firstByte));
    socket.once("data", (chunk: Buffer) => {
      clearTimeout(firstByte);
      socket.pause();
      const prefix = chunk.subarray(0, Math.min(chunk.length, HTTP2_PREFACE.length));
      if (HTTP2_PREFACE.subarray(0, prefix.length).equals(prefix)) {
        h2.emit("connection", replayingStream(socket, chunk));
      } else {
        socket.unshift(chunk);
        h1.emit("connection", socket);
        socket.resume();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    async close(graceMs) {
      server.close();
      h1.closeIdleConnections();
      for (const session of sessions) session.close();
      if (inFlight > 0) {
        await new Promise<void>((resolve) => {
          idle = resolve;
          setTimeout(resolve, graceMs).unref();
        });
      }
      for (const socket of sockets) socket.destroy();
      h1.close();
      h2.close();
    },
  };
}

/** What a JSON answer needs of a response: node:http's, node:http2's, and the one a Connect fallback is given all have it. */
export interface JsonResponse {
  writeHead(status: number, headers: OutgoingHttpHeaders): unknown;
  end(text: string): unknown;
}

/** Writes a complete JSON answer with its status, content type and length. */
export function sendJson(res: JsonResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  sendJsonText(res, status, JSON.stringify(body), headers);
}

/** Writes a complete answer of JSON text already encoded. */
export function sendJsonText(res: JsonResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

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
  /**
   * While an answer waits on the peer, the longest time between two writes that make progress
   * (nginx's send_timeout): a client that stops reading is closed, not left holding buffers.
   */
  sendMs: number;
}

export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 256;

export const DEFAULT_CONNECTION_DEADLINES: ConnectionDeadlines = {
  firstByteMs: 10_000,
  headersMs: 20_000,
  bodyMs: 60_000,
  keepAliveMs: 65_000,
  http2IdleMs: 65_000,
  sendMs: 60_000,
};

/** Answer bytes one connection may have waiting on its peer; past it the connection is closed. */
export const DEFAULT_MAX_BUFFERED_RESPONSE_BYTES = 16 * 1024 * 1024;

/**
 * Connections past the cap that may still be served, one probe request each: liveness and
 * readiness answer while a flood holds every other slot, so an orchestrator does not restart a
 * healthy process. Only a complete `GET /healthz` or `GET /readyz` head in the first packet gets one.
 */
export const PROBE_RESERVE_CONNECTIONS = 16;
const PROBE_REQUEST = /^GET \/(?:healthz|readyz)(?:\?\S*)? HTTP\/1\.[01]\r\n.*?\r\n\r\n/s;
/** What a client turned away at the cap is told to wait; slots free as the deadlines close connections. */
const RETRY_AFTER_SECONDS = 5;

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
  HTTP_SEND_TIMEOUT_SECONDS: number;
}): ConnectionDeadlines {
  return {
    firstByteMs: config.HTTP_FIRST_BYTE_TIMEOUT_SECONDS * 1000,
    headersMs: config.HTTP_HEADERS_TIMEOUT_SECONDS * 1000,
    bodyMs: config.HTTP_BODY_TIMEOUT_SECONDS * 1000,
    keepAliveMs: config.HTTP_KEEPALIVE_TIMEOUT_SECONDS * 1000,
    http2IdleMs: config.HTTP2_IDLE_TIMEOUT_SECONDS * 1000,
    sendMs: config.HTTP_SEND_TIMEOUT_SECONDS * 1000,
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

/** The TCP socket under each HTTP/2 session: node:http2 wraps the replaying stream, and its wrapper has no address. */
const sessionSockets = new WeakMap<http2.Http2Session, Socket>();

/** The address of the peer a request came from, over HTTP/1.1 or HTTP/2. */
export function peerAddress(req: IncomingMessage | Http2ServerRequest): string | undefined {
  if ("stream" in req) {
    const session = req.stream.session;
    return session ? sessionSockets.get(session)?.remoteAddress : undefined;
  }
  return req.socket?.remoteAddress;
}

function isHttp2Preface(chunk: Buffer): boolean {
  const prefix = chunk.subarray(0, Math.min(chunk.length, HTTP2_PREFACE.length));
  return HTTP2_PREFACE.subarray(0, prefix.length).equals(prefix);
}

/** A complete HTTP/1.1 answer a connection turned away at the cap gets, written on the raw socket. */
function busyAnswer(reason: string): string {
  const body = JSON.stringify({ error: reason });
  return (
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json; charset=utf-8\r\n" +
    `content-length: ${Buffer.byteLength(body)}\r\nretry-after: ${RETRY_AFTER_SECONDS}\r\nconnection: close\r\n\r\n${body}`
  );
}

/**
 * The HTTP/2 equivalent: the server's SETTINGS, then GOAWAY naming stream 0 as the last one
 * processed, so a client knows none of its streams ran and may retry them on a new connection.
 */
function busyGoaway(reason: string): Buffer {
  const debug = Buffer.from(reason);
  const settings = Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
  const goaway = Buffer.alloc(17 + debug.length);
  goaway.writeUIntBE(8 + debug.length, 0, 3);
  goaway[3] = 0x7;
  goaway.writeUInt32BE(0, 9);
  goaway.writeUInt32BE(http2.constants.NGHTTP2_NO_ERROR, 13);
  debug.copy(goaway, 17);
  return Buffer.concat([settings, goaway]);
}

/** How long a connection turned away at the cap may take to send its first bytes, and to read its answer. */
const TURN_AWAY_MS = 2000;

/** One accepted connection. */
interface Connection {
  socket: Socket;
  /** Its HTTP/2 streams: their answers wait in them while the peer's flow-control window is shut. */
  streams: Set<http2.ServerHttp2Stream>;
  /** Bytes the kernel had taken at the last check, and when they last grew while an answer waited. */
  sent: number;
  progressAt: number;
  /** Admitted past the cap for one probe request. */
  probe: boolean;
  /** HTTP/1.1: answers in progress, and when a request last started or an answer last ended. */
  answering: number;
  activeAt: number;
  /** Handed to the HTTP/2 server. */
  http2: boolean;
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
  /** Connections held at once; more are answered 503 and closed. Default: from the open-file limit. */
  maxConnections?: number;
  /** Connections one peer address may hold at once (one client cannot take every slot). */
  maxConnectionsPerAddress?: number;
  /** Peers exempt from the per-address cap: trusted proxies, which carry many clients. */
  isTrustedProxy?: (address: string | undefined) => boolean;
  /** Answer bytes one connection may have waiting on its peer. */
  maxBufferedResponseBytes?: number;
}): Promise<HttpServer> {
  const deadlines = { ...DEFAULT_CONNECTION_DEADLINES, ...options.deadlines };
  const maxConnections = defaultMaxConnections(options.maxConnections);
  const maxPerAddress = options.maxConnectionsPerAddress ?? DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
  const maxBuffered = options.maxBufferedResponseBytes ?? DEFAULT_MAX_BUFFERED_RESPONSE_BYTES;
  // Connections being answered 503 hold a descriptor for up to TURN_AWAY_MS: a few at a time, past
  // which a connection is closed as it arrives (below the open-file limit either way).
  const maxTurningAway = Math.min(64, Math.max(8, Math.floor(maxConnections / 8)));
  const perAddress = new Map<string, number>();
  const connections = new Map<Socket, Connection>();
  let probes = 0;
  let turningAway = 0;
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
    } else {
      const connection = connections.get(req.socket as Socket);
      if (connection) {
        connection.answering++;
        connection.activeAt = Date.now();
        res.once("close", () => {
          connection.answering--;
          connection.activeAt = Date.now();
        });
        // A probe's slot past the cap serves its one request.
        if (connection.probe) (res as ServerResponse).setHeader("connection", "close");
      }
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
  const sessions = new Set<http2.ServerHttp2Session>();
  // The connection whose socket is being handed to h2: its "session" event fires during the hand-over.
  let handingOver: Connection | undefined;
  h2.on("session", (session) => {
    sessions.add(session);
    const connection = handingOver;
    if (connection) sessionSockets.set(session, connection.socket);
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
      connection?.streams.add(stream);
      clearTimeout(timer);
      timer = undefined;
      stream.once("close", () => {
        open--;
        connection?.streams.delete(stream);
        if (open === 0 && !session.destroyed) arm();
      });
    });
    session.on("close", () => {
      clearTimeout(timer);
      sessions.delete(session);
    });
  });

  const admit = (socket: Socket, peer: string, probe: boolean): Connection => {
    const now = Date.now();
    const connection: Connection = { socket, streams: new Set(), sent: 0, progressAt: now, probe, answering: 0, activeAt: now, http2: false };
    connections.set(socket, connection);
    if (probe) probes++;
    else perAddress.set(peer, (perAddress.get(peer) ?? 0) + 1);
    socket.once("close", () => {
      connections.delete(socket);
      if (probe) {
        probes--;
        return;
      }
      const left = (perAddress.get(peer) ?? 1) - 1;
      if (left <= 0) perAddress.delete(peer);
      else perAddress.set(peer, left);
    });
    return connection;
  };
  /** Hands a connection, with its first bytes, to the HTTP/1.1 or the HTTP/2 server. */
  const serve = (connection: Connection, first: Buffer) => {
    const { socket } = connection;
    if (isHttp2Preface(first)) {
      connection.http2 = true;
      handingOver = connection;
      try {
        h2.emit("connection", replayingStream(socket, first));
      } finally {
        handingOver = undefined;
      }
    } else {
      socket.unshift(first);
      h1.emit("connection", socket);
      socket.resume();
    }
  };
  /**
   * Past a cap, a connection is answered, not reset: 503 with Retry-After (GOAWAY over HTTP/2), so
   * a client knows to come back; a probe request is served from the probes' reserve.
   */
  const turnAway = (socket: Socket, peer: string, reason: string) => {
    if (turningAway >= maxTurningAway) {
      socket.destroy();
      return;
    }
    turningAway++;
    let counted = true;
    const release = () => {
      if (counted) turningAway--;
      counted = false;
    };
    socket.once("close", release);
    const timer = setTimeout(() => socket.destroy(), Math.min(deadlines.firstByteMs, TURN_AWAY_MS)).unref();
    socket.once("data", (chunk: Buffer) => {
      clearTimeout(timer);
      if (!isHttp2Preface(chunk) && probes < PROBE_RESERVE_CONNECTIONS && PROBE_REQUEST.test(chunk.toString("latin1"))) {
        release();
        socket.pause();
        serve(admit(socket, peer, true), chunk);
        return;
      }
      // What else the client sends is read and dropped, so closing does not reset the answer away.
      socket.on("data", () => {});
      socket.end(isHttp2Preface(chunk) ? busyGoaway(reason) : busyAnswer(reason));
      setTimeout(() => socket.destroy(), TURN_AWAY_MS).unref();
    });
  };
  const server = net.createServer((socket) => {
    const peer = socket.remoteAddress ?? "";
    socket.on("error", () => socket.destroy());
    if (connections.size - probes >= maxConnections) {
      turnAway(socket, peer, `too many connections; retry after ${RETRY_AFTER_SECONDS} s`);
      return;
    }
    if ((perAddress.get(peer) ?? 0) >= maxPerAddress && !options.isTrustedProxy?.(peer)) {
      turnAway(socket, peer, `too many connections from your address; close some or retry after ${RETRY_AFTER_SECONDS} s`);
      return;
    }
    const connection = admit(socket, peer, false);
    const firstByte = setTimeout(() => socket.destroy(), deadlines.firstByteMs).unref();
    socket.once("close", () => clearTimeout(firstByte));
    socket.once("data", (chunk: Buffer) => {
      clearTimeout(firstByte);
      socket.pause();
      serve(connection, chunk);
    });
  });

  // The send timeout and the buffered-bytes cap: an answer waiting on a peer that reads nothing (or
  // keeps its HTTP/2 window shut) holds kernel and process memory until the connection is closed.
  // And an HTTP/1.1 connection with no request for the keep-alive and headers deadlines together is
  // closed whatever it sends: node:http's keep-alive timer restarts on any byte, a blank line too,
  // so a peer could hold answers the kernel buffered for it for ever.
  const h1IdleMs = deadlines.keepAliveMs + deadlines.headersMs;
  const watchdog = setInterval(
    () => {
      const now = Date.now();
      for (const connection of connections.values()) {
        const { socket } = connection;
        let waiting = socket.writableLength;
        for (const stream of connection.streams) waiting += stream.writableLength;
        const sent = socket.bytesWritten - socket.writableLength;
        if (waiting > maxBuffered) socket.destroy();
        else if (waiting === 0 || sent !== connection.sent) {
          connection.sent = sent;
          connection.progressAt = now;
        } else if (now - connection.progressAt > deadlines.sendMs) socket.destroy();
        if (waiting === 0 && !connection.http2 && connection.answering === 0 && now - connection.activeAt > h1IdleMs) socket.destroy();
      }
    },
    Math.min(1000, Math.max(100, Math.floor(deadlines.sendMs / 4))),
  ).unref();

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
      clearInterval(watchdog);
      for (const socket of connections.keys()) socket.destroy();
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

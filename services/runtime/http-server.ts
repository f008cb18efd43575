import http, { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import http2, { type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
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
export async function listenHttp(options: { host: string; port: number; handler: HttpHandler }): Promise<HttpServer> {
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const tracked: HttpHandler = (req, res) => {
    inFlight++;
    res.on("close", () => {
      inFlight--;
      if (inFlight === 0) idle?.();
    });
    options.handler(req, res);
  };
  const h1 = http.createServer({ keepAliveTimeout: 65_000 }, tracked);
  const h2 = http2.createServer({}, tracked);
  const sockets = new Set<Socket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.on("close", () => sessions.delete(session));
  });
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    socket.once("data", (chunk: Buffer) => {
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

import http2 from "node:http2";
import type net from "node:net";
import type { AddressInfo, Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { type ConnectionDeadlines, DEFAULT_CONNECTION_DEADLINES, listenHttp, type HttpHandler } from "../../runtime/http/http-server.js";
import type { SourceServerOptions } from "./definition.js";

export interface RunningSourceServer {
  port: number;
  /** e.g. http://127.0.0.1:9400 or https://127.0.0.1:9400 */
  url: string;
  close(): Promise<void>;
}

export interface SourceListenOptions {
  port?: number;
  host?: string;
  /** How long a connection may take over each phase; the service's own port's defaults otherwise. */
  deadlines?: Partial<ConnectionDeadlines>;
}

/** Serves `handler` on one port: HTTP/1.1 and HTTP/2, over TLS when the source's auth or tls asks for it. */
export async function listenSource(
  handler: HttpHandler,
  options: Pick<SourceServerOptions, "auth" | "tls">,
  listenOptions: SourceListenOptions = {},
): Promise<RunningSourceServer> {
  const deadlines = { ...DEFAULT_CONNECTION_DEADLINES, ...listenOptions.deadlines };
  const host = listenOptions.host ?? "127.0.0.1";
  const port = listenOptions.port ?? 0;
  const mtls = "mtls" in options.auth ? options.auth.mtls : undefined;
  const tlsMaterial = mtls ?? options.tls;
  if (tlsMaterial) {
    // ALPN picks HTTP/2 (gRPC) or HTTP/1.1 (JSON) on the one TLS port.
    const server = http2.createSecureServer(
      {
        allowHTTP1: true,
        // The same deadlines as the cleartext port: a connection that never finishes its
        // handshake, idles, or drips its headers gives its slot back.
        handshakeTimeout: deadlines.headersMs,
        cert: tlsMaterial.cert,
        key: tlsMaterial.key,
        ...(mtls ? { ca: mtls.ca, requestCert: true, rejectUnauthorized: true } : {}),
      },
      handler,
    );
    server.setTimeout(Math.min(deadlines.keepAliveMs, deadlines.http2IdleMs));
    const sessions = new Set<http2.ServerHttp2Session>();
    server.on("session", (session) => {
      sessions.add(session);
      session.on("close", () => sessions.delete(session));
    });
    const sockets = trackSockets(server, "secureConnection");
    server.on("secureConnection", (socket: TLSSocket) => {
      if (socket.alpnProtocol === "h2") return;
      // HTTP/1.1 over TLS: its headers must end within headersMs of the connection's first request.
      const timer = setTimeout(() => socket.destroy(), deadlines.headersMs).unref();
      let tail = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        // The blank line may arrive split across reads: the last three bytes are kept.
        const seen = Buffer.concat([tail, chunk]);
        tail = seen.subarray(Math.max(0, seen.length - 3));
        if (seen.includes("\r\n\r\n")) {
          clearTimeout(timer);
          socket.off("data", onData);
        }
      };
      socket.on("data", onData);
      socket.once("close", () => clearTimeout(timer));
    });
    await listenOn(server, port, host);
    const bound = (server.address() as AddressInfo).port;
    return {
      port: bound,
      url: `https://${formatHost(host)}:${bound}`,
      close: () => closeAll(server, sessions, sockets),
    };
  }
  // Cleartext: the first bytes tell HTTP/2 prior knowledge (gRPC) from HTTP/1.1.
  const server = await listenHttp({ host, port, handler, deadlines });
  return {
    port: server.port,
    url: `http://${formatHost(host)}:${server.port}`,
    close: () => server.close(0),
  };
}

function trackSockets(server: net.Server, event: "connection" | "secureConnection"): Set<Socket> {
  const sockets = new Set<Socket>();
  server.on(event, (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  return sockets;
}

function listenOn(server: net.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
}

async function closeAll(server: net.Server, sessions: Set<http2.ServerHttp2Session>, sockets: Set<Socket>): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  for (const session of sessions) session.close();
  for (const socket of sockets) socket.destroy();
  await closed;
}

function formatHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

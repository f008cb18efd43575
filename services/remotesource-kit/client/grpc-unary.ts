import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import type { VettedTarget } from "../../runtime/egress/index.js";

/**
 * One unary gRPC call over HTTP/2, on a connection pinned to an address the egress policy vetted.
 * Written out rather than taken from a gRPC library so that the connection goes only where the
 * policy said, and a response is never buffered beyond the size cap: the 5-byte frame header says
 * how long the message is, and a message above the cap is abandoned before its first byte is kept.
 */

export type GrpcAnswer =
  | { kind: "message"; bytes: Uint8Array }
  | { kind: "status"; code: number; message: string }
  | { kind: "too-large"; declaredBytes: number }
  /** The server answered HTTP, not gRPC (e.g. a proxy's 401 or 404). */
  | { kind: "http"; status: number };

export interface GrpcUnaryRequest {
  target: VettedTarget;
  /** e.g. /warroom.sourceprotocol.v1.SourceService/Health */
  path: string;
  metadata: Record<string, string>;
  body: Uint8Array;
  tls?: { ca?: string[]; cert?: string; key?: string };
  timeoutMs: number;
  maxMessageBytes: number;
}

export class GrpcTransportError extends Error {
  constructor(
    readonly reason: "timeout" | "network" | "tls" | "protocol",
    message: string,
  ) {
    super(message);
    this.name = "GrpcTransportError";
  }
}

const FRAME_HEADER_BYTES = 5;

/**
 * One unary gRPC call over HTTP/2 to the vetted target, within its time budget, never reading a
 * message over `maxMessageBytes`: answers the message, the status, or what else came back.
 */
export function grpcUnary(request: GrpcUnaryRequest): Promise<GrpcAnswer> {
  const { target, timeoutMs, maxMessageBytes } = request;
  const isTls = target.url.protocol === "https:";
  const host = target.hostname;

  return new Promise<GrpcAnswer>((resolve, reject) => {
    let settled = false;
    const connect = () =>
      isTls
        ? tls.connect({
            host: target.address,
            port: target.port,
            // Certificate and SNI follow the name in the URL; the socket goes to the vetted address.
            ...(net.isIP(host) ? {} : { servername: host }),
            ALPNProtocols: ["h2"],
            ...(request.tls?.ca ? { ca: request.tls.ca } : {}),
            ...(request.tls?.cert ? { cert: request.tls.cert } : {}),
            ...(request.tls?.key ? { key: request.tls.key } : {}),
          })
        : net.connect({ host: target.address, port: target.port });
    const authority = `${target.url.protocol}//${net.isIPv6(host) ? `[${host}]` : host}:${target.port}`;
    const session = http2.connect(authority, { createConnection: connect });

    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outcome();
      session.destroy();
    };
    const fail = (error: unknown) => finish(() => reject(transportError(error, host)));
    const answer = (value: GrpcAnswer) => finish(() => resolve(value));

    const timer = setTimeout(() => fail(new GrpcTransportError("timeout", `The call to ${host} took longer than ${timeoutMs} ms`)), timeoutMs);
    session.on("error", fail);

    const stream = session.request({
      ":method": "POST",
      ":path": request.path,
      "content-type": "application/grpc+proto",
      te: "trailers",
      "grpc-timeout": `${Math.max(1, Math.floor(timeoutMs))}m`,
      "grpc-accept-encoding": "identity",
      ...request.metadata,
    });
    stream.on("error", fail);

    let headerStatus: string | undefined;
    let headerMessage: string | undefined;
    let frame: { compressed: boolean; length: number } | undefined;
    const chunks: Buffer[] = [];
    let buffered = 0;

    stream.on("response", (headers) => {
      const status = Number(headers[":status"]);
      if (status !== 200) return answer({ kind: "http", status });
      const contentType = String(headers["content-type"] ?? "");
      if (!contentType.startsWith("application/grpc"))
        return fail(new GrpcTransportError("protocol", `${host} did not answer gRPC (content-type ${contentType || "none"})`));
      // A trailers-only answer carries its status in the headers.
      if (headers["grpc-status"] !== undefined) {
        headerStatus = String(headers["grpc-status"]);
        headerMessage = headers["grpc-message"] === undefined ? undefined : String(headers["grpc-message"]);
      }
    });

    stream.on("data", (chunk: Buffer) => {
      if (settled) return;
      chunks.push(chunk);
      buffered += chunk.byteLength;
      if (!frame && buffered >= FRAME_HEADER_BYTES) {
        const head = Buffer.concat(chunks, buffered);
        frame = { compressed: head[0] !== 0, length: head.readUInt32BE(1) };
        if (frame.length > maxMessageBytes) return answer({ kind: "too-large", declaredBytes: frame.length });
        if (frame.compressed) return fail(new GrpcTransportError("protocol", `${host} sent a compressed message, which was not offered`));
      }
      if (frame && buffered > FRAME_HEADER_BYTES + frame.length) {
        return fail(new GrpcTransportError("protocol", `${host} sent more than one message to a unary call`));
      }
    });

    let trailers: http2.IncomingHttpHeaders | undefined;
    stream.on("trailers", (t) => {
      trailers = t;
    });

    stream.on("close", () => {
      if (settled) return;
      const statusText = trailers?.["grpc-status"] ?? headerStatus;
      if (statusText === undefined) return fail(new GrpcTransportError("protocol", `${host} closed the call without a gRPC status`));
      const code = Number(statusText);
      if (code !== 0) {
        const raw = trailers?.["grpc-message"] ?? headerMessage ?? "";
        return answer({ kind: "status", code, message: decodeGrpcMessage(String(raw)) });
      }
      if (!frame || buffered < FRAME_HEADER_BYTES + frame.length) {
        return fail(new GrpcTransportError("protocol", `${host} answered OK without a complete message`));
      }
      const all = Buffer.concat(chunks, buffered);
      answer({ kind: "message", bytes: all.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + frame.length) });
    });

    const head = Buffer.alloc(FRAME_HEADER_BYTES);
    head.writeUInt32BE(request.body.byteLength, 1);
    stream.end(Buffer.concat([head, request.body]));
  });
}

function decodeGrpcMessage(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

function transportError(error: unknown, host: string): GrpcTransportError {
  if (error instanceof GrpcTransportError) return error;
  const code = (error as { code?: unknown } | null)?.code;
  const suffix = typeof code === "string" ? ` (${code})` : "";
  if (typeof code === "string" && (/^ERR_(SSL|TLS)_/.test(code) || /CERT|SELF_SIGNED|UNABLE_TO_/.test(code) || code === "EPROTO")) {
    return new GrpcTransportError("tls", `TLS with ${host} failed${suffix}`);
  }
  // The library message may quote the URL: only the host and the code travel.
  return new GrpcTransportError("network", `The connection to ${host} failed${suffix}`);
}

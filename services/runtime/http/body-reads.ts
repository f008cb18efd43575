import type { IncomingMessage, ServerResponse } from "node:http";
import http2, { type Http2ServerRequest, type Http2ServerResponse, type Http2Session } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { CLIENT_ADDRESS_HEADER } from "./client-address.js";
import { deliveriesInFlight as gatewayDeliveriesInFlight, deliveryBodiesReading, deliveryBytesHeld } from "../observability/metrics.js";
import { peerAddress } from "./http-server.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/**
 * Bounds on the delivery bodies being read at once. A delivery's body is read before anything
 * else is known of it (its credential travels to intake with it), so a sender that sends its
 * headers and then drips the body holds what it takes until the body deadline
 * (HTTP_BODY_TIMEOUT_SECONDS). Reading is therefore bounded apart from the deliveries in flight:
 * per client address, per HTTP/2 connection (in streams), and over the process, so a slow sender
 * holds only its own reading slots and never the slots that everyone's deliveries take once read.
 */
export interface BodyReadLimits {
  /** Over every sender: the bodies in memory while they arrive, each up to its route's limit. */
  total: number;
  /** Of one client address (after TRUSTED_PROXY_CIDRS), over all its connections. */
  perAddress: number;
  /** Of one HTTP/2 connection, in streams; a trusted proxy's connections carry many clients and are exempt. */
  perConnection: number;
}

/**
 * Why a delivery was refused before its body was read: its address, or its HTTP/2 connection, had
 * as many bodies being read as it may (a slow sender), or every reading slot was taken.
 */
export type BodyReadRefusal = "slow-sender" | "slow-connection" | "reading-full";

/** Seconds a refused sender is told to wait: reads of healthy senders end in milliseconds. */
export const BODY_READ_RETRY_AFTER_SECONDS = 1;

export type BodyReads = ReturnType<typeof createBodyReads>;

/**
 * The body-reading slots of one process, shared by every surface of the public port (REST routes,
 * Connect, gRPC). `admit` takes a slot for a delivery whose headers have arrived and frees it when
 * the body has been received or the exchange ends; it returns the refusal when there is no room.
 */
export function createBodyReads(options: BodyReadLimits & { isTrustedProxy?: (peer: string | undefined) => boolean }) {
  const perAddress = new Map<string, number>();
  const perSession = new Map<Http2Session, number>();
  let reading = 0;

  const add = <K>(map: Map<K, number>, key: K, by: number) => {
    const left = (map.get(key) ?? 0) + by;
    if (left <= 0) map.delete(key);
    else map.set(key, left);
  };

  return {
    admit(req: Request, res: Response): BodyReadRefusal | undefined {
      // The client address the public port resolved (client-address.ts), never one the caller chose.
      const header = req.headers[CLIENT_ADDRESS_HEADER];
      const address = (Array.isArray(header) ? header[0] : header) ?? "";
      const session = "stream" in req && !options.isTrustedProxy?.(peerAddress(req)) ? req.stream.session : undefined;
      if ((perAddress.get(address) ?? 0) >= options.perAddress) return "slow-sender";
      if (session && (perSession.get(session) ?? 0) >= options.perConnection) return "slow-connection";
      if (reading >= options.total) return "reading-full";
      reading += 1;
      deliveryBodiesReading.inc();
      add(perAddress, address, 1);
      if (session) add(perSession, session, 1);
      let held = true;
      const release = () => {
        if (!held) return;
        held = false;
        reading -= 1;
        deliveryBodiesReading.dec();
        add(perAddress, address, -1);
        if (session) add(perSession, session, -1);
      };
      // A body already complete holds nothing; 'end' comes once the body is read, whoever reads
      // it; 'close' when the exchange ends without that (refused, timed out, the client gone).
      if (req.complete) release();
      req.once("end", release);
      res.once("close", release);
      return undefined;
    },
    /** The refusal as a Connect error (see bodyReadError), with the limits in its message. */
    error: (refusal: BodyReadRefusal, code?: Code) => bodyReadError(refusal, options, code),
  };
}

/** The answer's message: what happened and what the sender should do. */
function bodyReadRefusalMessage(refusal: BodyReadRefusal, limits: BodyReadLimits): string {
  const retry = `send it again after ${BODY_READ_RETRY_AFTER_SECONDS} s (Retry-After)`;
  switch (refusal) {
    case "slow-sender":
      return `This address has ${limits.perAddress} deliveries still sending their bodies, the most one address may have; finish sending those, then ${retry}`;
    case "slow-connection":
      return `This connection has ${limits.perConnection} streams still sending delivery bodies, the most one connection may have; finish sending those, then ${retry}`;
    case "reading-full":
      return `This server is reading as many delivery bodies as it takes (${limits.total}); ${retry}`;
  }
}

/**
 * The refusal as a Connect error: resource_exhausted when the sender's own reads fill its bound,
 * unavailable when every sender's do.
 */
function bodyReadError(refusal: BodyReadRefusal, limits: BodyReadLimits, code?: Code): ConnectError {
  return new ConnectError(bodyReadRefusalMessage(refusal, limits), code ?? (refusal === "reading-full" ? Code.Unavailable : Code.ResourceExhausted), {
    "retry-after": String(BODY_READ_RETRY_AFTER_SECONDS),
  });
}

/**
 * The headers of an answer whose request body is not read: HTTP/1.1 closes the connection after it
 * (the unread body would otherwise be taken for the next request). HTTP/2 has no such header.
 */
export function closingHeaders(req: Request): Record<string, string> {
  return "stream" in req ? {} : { connection: "close" };
}

/** HTTP/2: resets the stream once the answer is sent, which tells the client to stop sending its body. */
export function stopReading(req: Request, res: Response): void {
  if (!("stream" in req)) return;
  const stream = req.stream;
  res.once("finish", () => {
    if (!stream.destroyed && !stream.closed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
  });
}

/**
 * Answers a Connect, gRPC or gRPC-web call with `error` before its body is read, in the call's
 * protocol: a Connect error body with its HTTP status, or a gRPC status in a trailers-only answer.
 */
export function sendRpcError(req: Request, res: Response, error: ConnectError): void {
  const contentType = String(req.headers["content-type"] ?? "");
  stopReading(req, res);
  if (contentType.startsWith("application/grpc")) {
    const headers = setTrailerStatus(new Headers({ "content-type": contentType.split(";")[0]! }), error);
    res.writeHead(200, { ...Object.fromEntries(headers), ...closingHeaders(req) });
    res.end();
    return;
  }
  const body = errorToJsonBytes(error, {});
  res.writeHead(codeToHttpStatus(error.code), {
    "content-type": "application/json",
    "content-length": body.byteLength,
    ...Object.fromEntries(error.metadata),
    ...closingHeaders(req),
  });
  res.end(body);
}

/**
 * The bound on delivery bodies held in memory once read, while their deliveries are handled: in
 * bytes over the process, and a quarter of that per client address. It bounds memory only, and is
 * large enough never to be the bottleneck of deliveries: those are bounded where their credential
 * is known (intake's fair shares: INTAKE_IN_FLIGHT over the process, INTAKE_ORG_IN_FLIGHT per
 * organization), so complete deliveries with a wrong credential, which the gateway cannot tell
 * from good ones, never take a slot an authenticated sender needs.
 */
export interface HeldBodyLimits {
  /** Bytes of read delivery bodies held over every sender (GATEWAY_DELIVERY_BYTES). */
  bytes: number;
}

/** Of the held bytes, the part one client address may hold: a quarter. */
export const HELD_BYTES_PER_ADDRESS_SHARE = 4;

export type HeldBodies = ReturnType<typeof createHeldBodies>;

/**
 * The held-body bytes of one process. `hold` counts a read body of `bytes` until its exchange
 * ends, or returns false when its address's part or the whole bound would be passed.
 */
export function createHeldBodies(limits: HeldBodyLimits) {
  const perAddressBytes = Math.floor(limits.bytes / HELD_BYTES_PER_ADDRESS_SHARE);
  const perAddress = new Map<string, number>();
  let held = 0;
  let deliveries = 0;

  return {
    hold(req: Request, res: Response, bytes: number): "address" | "process" | undefined {
      const header = req.headers[CLIENT_ADDRESS_HEADER];
      const address = (Array.isArray(header) ? header[0] : header) ?? "";
      const ofAddress = perAddress.get(address) ?? 0;
      if (ofAddress + bytes > perAddressBytes) return "address";
      if (held + bytes > limits.bytes) return "process";
      held += bytes;
      deliveries += 1;
      perAddress.set(address, ofAddress + bytes);
      deliveryBytesHeld.inc(bytes);
      gatewayDeliveriesInFlight.inc();
      let holding = true;
      const release = () => {
        if (!holding) return;
        holding = false;
        held -= bytes;
        deliveries -= 1;
        const left = (perAddress.get(address) ?? 0) - bytes;
        if (left <= 0) perAddress.delete(address);
        else perAddress.set(address, left);
        deliveryBytesHeld.dec(bytes);
        gatewayDeliveriesInFlight.dec();
      };
      res.once("finish", release);
      res.once("close", release);
      return undefined;
    },
    /** The refusal as a Connect error in `code`, with the bound in its message and Retry-After. */
    error(refusal: "address" | "process", code: Code): ConnectError {
      const retry = `send it again after ${BODY_READ_RETRY_AFTER_SECONDS} s (Retry-After)`;
      const message =
        refusal === "address"
          ? `This address has as many bytes of delivery bodies held in memory as one address may (${perAddressBytes}); wait for its deliveries' answers, then ${retry}`
          : `This server has as many bytes of delivery bodies held in memory as it takes (${limits.bytes}); ${retry}`;
      return new ConnectError(message, code, { "retry-after": String(BODY_READ_RETRY_AFTER_SECONDS) });
    },
    /** What is held now: for tests that nothing is left behind. */
    state: () => ({ bytes: held, deliveries, addresses: perAddress.size }),
  };
}

/**
 * Reads a request's body up to `limit` bytes; past it (or when Content-Length already says more),
 * stops reading (the answer closes the connection or, over HTTP/2, the stream) and answers
 * "too-large". Rejects when the request fails or closes before its end. Read through listeners
 * rather than an async iterator: the iterator and the end-of-stream watcher under it cost about
 * 5 µs of every delivery. The listeners are shared functions that find the read on the request,
 * so a read makes no functions of its own.
 */
export function readBodyAtMost(req: Request, limit: number): Promise<Buffer | "too-large"> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) return Promise.resolve("too-large");
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0));
  if (req.destroyed) return Promise.reject(prematureClose());
  return new Promise((resolve, reject) => {
    (req as ReadingRequest)[BODY_READ] = { chunks: [], length: 0, limit, resolve, reject };
    req.on("data", onBodyData);
    req.on("end", onBodyEnd);
    req.on("error", onBodyError);
    req.on("close", onBodyClose);
    // A 'data' listener starts the flow unless someone paused the request: read it all the same.
    if (req.isPaused()) req.resume();
  });
}

const BODY_READ = Symbol("body read");

interface BodyRead {
  chunks: Buffer[];
  length: number;
  limit: number;
  resolve(body: Buffer | "too-large"): void;
  reject(err: Error): void;
}

type ReadingRequest = Request & { [BODY_READ]?: BodyRead };

function onBodyData(this: ReadingRequest, chunk: Buffer): void {
  const read = this[BODY_READ]!;
  read.length += chunk.byteLength;
  if (read.length <= read.limit) {
    read.chunks.push(chunk);
    return;
  }
  stopBodyRead(this);
  this.pause();
  read.resolve("too-large");
}

function onBodyEnd(this: ReadingRequest): void {
  const read = stopBodyRead(this);
  read.resolve(read.chunks.length === 1 ? read.chunks[0]! : Buffer.concat(read.chunks, read.length));
}

function onBodyError(this: ReadingRequest, err: Error): void {
  stopBodyRead(this).reject(err);
}

function onBodyClose(this: ReadingRequest): void {
  stopBodyRead(this).reject(prematureClose());
}

function stopBodyRead(req: ReadingRequest): BodyRead {
  const read = req[BODY_READ]!;
  req[BODY_READ] = undefined;
  req.off("data", onBodyData);
  req.off("end", onBodyEnd);
  req.off("error", onBodyError);
  req.off("close", onBodyClose);
  return read;
}

/** What a request that closed before its body ended rejects with: the error Node's streams give. */
function prematureClose(): Error {
  return Object.assign(new Error("Premature close"), { code: "ERR_STREAM_PREMATURE_CLOSE" });
}

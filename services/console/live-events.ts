import { fromBinary, type JsonObject, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { messageToHttpJson } from "../gateway/http-json.js";
import { errorAnswer } from "../gateway/response-rules.js";
import { sendJson } from "../runtime/http/http-server.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { DomainEvent, EventBus } from "../runtime/transport/event-bus.js";
import { EVENTS, eventTypeOf, type EventType } from "../runtime/transport/events.js";
import type { Logger } from "../runtime/observability/logger.js";
import { bearerToken } from "../runtime/credentials/auth.js";
import { sha256Hex } from "../runtime/credentials/secrets.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/** The domain events a console watches; each is sent on the stream under its catalog name. */
export const LIVE_EVENTS: readonly EventType[] = [
  EVENTS.incidentOpened,
  EVENTS.timelineRecorded,
  EVENTS.incidentResolved,
  EVENTS.severityChanged,
  EVENTS.updateSent,
  EVENTS.evidenceRecorded,
  EVENTS.investigationCompleted,
];

export interface LiveEventsOptions {
  events: EventBus;
  clients: Clients;
  logger: Logger;
  /** A comment line keeps proxies and load balancers from closing an idle stream. */
  keepaliveMs?: number;
  /** How often a stream's credential is checked again; a revoked or expired one ends the stream. */
  recheckMs?: number;
  /** Streams one process holds at most; past it a new one answers 503. */
  maxStreams?: number;
}

interface Stream {
  orgId: string;
  org: string;
  authorization: string;
  /** SHA-256 (hex) of the stream's bearer credential, matched against revocation events. */
  credentialHash: string;
  res: Response;
  checkedAt: number;
  checking: boolean;
}

/** A stream whose client reads slower than events arrive is ended past this many unsent bytes. */
const MAX_BUFFERED_BYTES = 1024 * 1024;

/**
 * `GET /o/{org}/events`: a server-sent event stream of the organization's incident and update
 * events, for the console's live views. One subscription per process (made when the first stream
 * opens, without a durable name, so every gateway replica sees every event) fans out to the
 * streams of the caller's organization. An event says what changed (`incident.opened`,
 * `incident.timeline_recorded`, `incident.resolved`, `update.sent`, with the incident id); the
 * console then reads the current state through the REST routes, so a stream that drops and
 * reconnects loses nothing: the client reads again on reconnect.
 */
export function createLiveEvents(options: LiveEventsOptions) {
  const { events, clients, logger } = options;
  const keepaliveMs = options.keepaliveMs ?? 20_000;
  const recheckMs = options.recheckMs ?? 60_000;
  const maxStreams = options.maxStreams ?? 5_000;
  const streams = new Set<Stream>();
  let subscribed: Promise<void> | undefined;
  let closed = false;
  let ticker: NodeJS.Timeout | undefined;

  function dispatch(event: DomainEvent): void {
    const known = eventTypeOf(event.subject);
    if (!known || !LIVE_EVENTS.includes(known) || streams.size === 0) return;
    let json: JsonObject;
    try {
      const message = fromBinary(known.schema, event.payload);
      json = messageToHttpJson(known.schema, message) as JsonObject;
    } catch (err) {
      logger.warn({ err, subject: event.subject, id: event.id }, "live event not decoded");
      return;
    }
    const orgId = json.orgId;
    delete json.orgId;
    const frame = `id: ${event.id}\nevent: ${known.name}\ndata: ${JSON.stringify(json)}\n\n`;
    for (const stream of streams) {
      if (stream.orgId === orgId) write(stream, frame);
    }
  }

  function write(stream: Stream, text: string): void {
    if (stream.res.writableEnded || stream.res.destroyed) return;
    if (stream.res.writableLength > MAX_BUFFERED_BYTES) {
      end(stream);
      return;
    }
    (stream.res as ServerResponse).write(text);
  }

  function end(stream: Stream): void {
    streams.delete(stream);
    if (!stream.res.writableEnded) stream.res.end();
  }

  /** A revoked session or API key ends its streams at once, on every replica. */
  function revoked(event: DomainEvent): void {
    let changed: MessageShape<typeof EVENTS.credentialChanged.schema>;
    try {
      changed = fromBinary(EVENTS.credentialChanged.schema, event.payload);
    } catch {
      return;
    }
    if (!changed.revokedHash) return;
    for (const stream of [...streams]) {
      if (stream.credentialHash === changed.revokedHash) {
        write(stream, `event: unauthorized\ndata: {}\n\n`);
        end(stream);
      }
    }
  }

  function subscribe(): Promise<void> {
    subscribed ??= (async () => {
      await events.subscribe(EVENTS.credentialChanged.subject, async (event) => revoked(event));
      for (const type of LIVE_EVENTS) {
        await events.subscribe(type.subject, async (event) => dispatch(event));
      }
    })().catch((err) => {
      subscribed = undefined;
      throw err;
    });
    return subscribed;
  }

  async function recheck(stream: Stream): Promise<void> {
    stream.checking = true;
    try {
      const principal = await clients.identity.authenticate({ org: stream.org }, { headers: { authorization: stream.authorization } });
      if (principal.orgId !== stream.orgId) throw new ConnectError("organization changed", Code.PermissionDenied);
      stream.checkedAt = Date.now();
    } catch (err) {
      const code = ConnectError.from(err).code;
      // Only a refused credential ends the stream; an identity service that is briefly away does not.
      if (code === Code.Unauthenticated || code === Code.PermissionDenied || code === Code.NotFound) {
        write(stream, `event: unauthorized\ndata: {}\n\n`);
        end(stream);
      }
    } finally {
      stream.checking = false;
    }
  }

  function tick(): void {
    const now = Date.now();
    for (const stream of streams) {
      write(stream, ": keepalive\n\n");
      if (!stream.checking && now - stream.checkedAt >= recheckMs) void recheck(stream);
    }
  }

  return {
    /** Answers `GET /o/{org}/events`. */
    async handle(req: Request, res: Response, org: string): Promise<void> {
      const authorization = req.headers.authorization;
      if (!authorization) {
        sendJson(res, 401, { error: "missing credential: send Authorization: Bearer <session token or API key>" });
        return;
      }
      let principal: Awaited<ReturnType<Clients["identity"]["authenticate"]>>;
      try {
        principal = await clients.identity.authenticate({ org }, { headers: { authorization } });
      } catch (err) {
        const answer = errorAnswer(undefined, ConnectError.from(err));
        sendJson(res, answer.status, answer.body, answer.headers);
        return;
      }
      if (closed || streams.size >= maxStreams) {
        sendJson(res, 503, { error: "live updates are unavailable here; retry" }, { "retry-after": "5" });
        return;
      }
      try {
        await subscribe();
      } catch (err) {
        logger.warn({ err }, "live events: subscription failed");
        sendJson(res, 503, { error: "live updates are unavailable; retry" }, { "retry-after": "5" });
        return;
      }
      const headers: Record<string, string> = {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        "x-accel-buffering": "no",
        "x-content-type-options": "nosniff",
      };
      (res as ServerResponse).writeHead(200, headers);
      const credentialHash = sha256Hex(bearerToken(authorization) ?? "");
      const stream: Stream = { orgId: principal.orgId, org, authorization, credentialHash, res, checkedAt: Date.now(), checking: false };
      streams.add(stream);
      res.on("close", () => streams.delete(stream));
      // The client waits `retry` before reconnecting; `ready` tells it the stream is live.
      write(stream, `retry: 3000\nevent: ready\ndata: ${JSON.stringify({ org: principal.orgSlug })}\n\n`);
      ticker ??= setInterval(tick, keepaliveMs).unref();
    },
    /** Streams open now. */
    size: () => streams.size,
    /** Ends every stream; their clients reconnect (to another replica when this one stops). */
    close(): void {
      closed = true;
      if (ticker) clearInterval(ticker);
      ticker = undefined;
      for (const stream of [...streams]) end(stream);
    },
  };
}

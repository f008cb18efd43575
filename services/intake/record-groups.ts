import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import { type IncidentsService, type RecordRequest, RecordRequestSchema, type RecordResponse } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { recordGroupSize } from "../runtime/observability/metrics.js";
import { currentDeadline, currentRequestId, outsideCall, REQUEST_ID_HEADER } from "../runtime/http/request-context.js";
import { currentTraceparent, detached, inSpan, linkTraces } from "../runtime/observability/tracing.js";
import type { AlertInit } from "./sources/index.js";

/**
 * Intake's calls to the incident core over the bus, in groups: up to `lanes` calls in flight at
 * once; the deliveries that arrive while every lane is busy wait, and when a call ends they go
 * together in one RecordMany (at most `maxGroup` deliveries and `maxBytes` encoded). A delivery
 * that finds a lane free goes alone, as Record: a quiet system waits for nothing. Over NATS each
 * call costs both ends and the server a message and its handling; a storm's deliveries share them.
 * The incident core decides a group as its own group commit does (RecordMany's batch path).
 *
 * Each delivery keeps what it had alone:
 * - its own answer or error (RecordMany answers each delivery; a call that fails fails each);
 * - its deadline: a group's call carries the shortest of its members' budgets, and a delivery
 *   whose deadline passed while it waited fails without being sent;
 * - its trace (its `traceparent` travels with it, the group's span links to every member) and its
 *   request id.
 */

/** A delivery for Record: its caller's trace and request id are the call's own. */
export interface RecordInit {
  orgId: string;
  orgSlug: string;
  alert: AlertInit;
  retryKey: string;
  /** The correlation group an incident this delivery opens joins; empty: none. */
  correlationGroupId?: string;
}
export type RecordCall = (req: RecordInit, requestId: string) => Promise<RecordResponse>;

/** Calls in flight at once, as the incident core's own group commit. */
const LANES = 2;
/** The most deliveries one RecordMany carries. */
const MAX_GROUP = 100;
/** And the most bytes (encoded): one bus message of the default 1 MiB, with room to spare. */
const MAX_GROUP_BYTES = 768 * 1024;
/** A group whose members carry no deadline waits this long for its answer (the transport's default). */
const GROUP_TIMEOUT_MS = 15_000;

interface Waiting {
  req: RecordRequest;
  bytes: number;
  deadline: number | undefined;
  resolve: (answer: RecordResponse) => void;
  reject: (err: unknown) => void;
}

/** Record, one call per delivery: the in-process transport, where a call costs nothing to carry. */
export function recordAlone(incidents: Client<typeof IncidentsService>): RecordCall {
  return (req, requestId) => incidents.record(req, { headers: { [REQUEST_ID_HEADER]: requestId } });
}

export function recordInGroups(incidents: Client<typeof IncidentsService>, options: { lanes?: number; maxGroup?: number; maxBytes?: number } = {}): RecordCall {
  const lanes = options.lanes ?? LANES;
  const maxGroup = options.maxGroup ?? MAX_GROUP;
  const maxBytes = options.maxBytes ?? MAX_GROUP_BYTES;
  const alone = recordAlone(incidents);
  let inFlight = 0;
  const waiting: Waiting[] = [];

  /** The next group: members still within their deadline, up to the group's limits. */
  function takeGroup(): Waiting[] {
    const group: Waiting[] = [];
    let bytes = 0;
    const now = Date.now();
    while (waiting.length > 0 && group.length < maxGroup) {
      const next = waiting[0]!;
      if (next.deadline !== undefined && next.deadline <= now) {
        waiting.shift();
        next.reject(new ConnectError("the caller's deadline passed before the delivery was sent", Code.DeadlineExceeded));
        continue;
      }
      if (group.length > 0 && bytes + next.bytes > maxBytes) break;
      waiting.shift();
      group.push(next);
      bytes += next.bytes;
    }
    return group;
  }

  async function send(group: Waiting[]): Promise<void> {
    recordGroupSize.observe(group.length);
    const deadlines = group.flatMap((w) => (w.deadline === undefined ? [] : [w.deadline]));
    const timeoutMs = deadlines.length > 0 ? Math.max(1, Math.min(...deadlines) - Date.now()) : GROUP_TIMEOUT_MS;
    try {
      const response = await inSpan("intake.record_group", { attributes: { "warroom.record.group_size": group.length } }, () => {
        linkTraces(group.map((w) => w.req.traceparent));
        return incidents.recordMany({ deliveries: group.map((w) => w.req) }, { timeoutMs });
      });
      for (const [i, w] of group.entries()) {
        const error = response.errors[i];
        const answer = response.results[i];
        if (error !== undefined) w.reject(errorOf(error));
        else if (answer) w.resolve(answer);
        else w.reject(new ConnectError("the incident core answered the group without this delivery", Code.Internal));
      }
    } catch (err) {
      for (const w of group) w.reject(err);
    }
  }

  // A group belongs to no one caller: not to its trace, nor to its deadline or request id.
  const next = detached((): void => {
    const group = takeGroup();
    if (group.length === 0) {
      inFlight--;
      return;
    }
    void outsideCall(() => send(group)).finally(next);
  });

  return async (init, requestId) => {
    if (inFlight < lanes) {
      inFlight++;
      try {
        recordGroupSize.observe(1);
        return await alone(init, requestId);
      } finally {
        next();
      }
    }
    const req = create(RecordRequestSchema, { ...init, traceparent: currentTraceparent() ?? "", requestId: requestId || (currentRequestId() ?? "") });
    // Sized by the encoded request, with room for the repeated field's tag and length.
    const bytes = toBinary(RecordRequestSchema, req).byteLength + 8;
    const deadline = currentDeadline();
    return new Promise<RecordResponse>((resolve, reject) => {
      waiting.push({ req, bytes, deadline, resolve, reject });
    });
  };
}

/** A delivery's error in RecordMany's answer (a ConnectError's message: "[code] text"), as that error. */
function errorOf(message: string): ConnectError {
  const match = /^\[([a-z_]+)\] (.*)$/s.exec(message);
  const code = match ? codeFromString(match[1]!) : undefined;
  return code === undefined ? new ConnectError(message, Code.Internal) : new ConnectError(match![2]!, code);
}

import { AsyncResource } from "node:async_hooks";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { IncidentsService, RecordRequest, RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { throwIfCallerGaveUp } from "../runtime/http/request-context.js";
import { currentTraceparent, detached } from "../runtime/observability/tracing.js";
import type { RecordBatch } from "./record-many.js";

/**
 * Group commit of Record: up to `lanes` deliveries or groups are in flight at once; the deliveries
 * that arrive while all are busy wait, and when one ends they are decided together by the batch
 * path of RecordMany, in a handful of statements (and commits) instead of one each. A delivery
 * that arrives with a lane free goes straight to Record: a quiet system waits for nothing. More
 * than one lane keeps a slow statement (a loaded database) from holding every delivery behind it.
 *
 * Each caller gets its own answer. What the batch path leaves undecided (suppressions, a second
 * delivery of an identity, a concurrent change since its read) goes through Record, each in its
 * caller's own context; so does everything not yet decided when a batch statement fails, so that
 * one bad delivery never turns into errors for the others.
 */

type RecordResponseInit = MessageInitShape<typeof RecordResponseSchema>;
type RecordHandler = ServiceImpl<typeof IncidentsService>["record"];

/** The most deliveries one group decides; more wait for the next group. */
export const MAX_GROUP = 100;
/** Deliveries or groups in flight at once. */
export const LANES = 2;

interface Waiting {
  req: RecordRequest;
  traceContext: string | null;
  /** Record for this delivery alone, in its caller's context (deadline, trace). */
  alone: () => Promise<RecordResponseInit>;
  /** Throws when this caller has given up, checked in its own context. */
  checkCaller: () => void;
  resolve: (answer: RecordResponseInit) => void;
  reject: (err: unknown) => void;
}

export function groupCommitted(record: RecordHandler, batch: RecordBatch, options: { maxGroup?: number; lanes?: number } = {}): RecordHandler {
  const maxGroup = options.maxGroup ?? MAX_GROUP;
  const lanes = options.lanes ?? LANES;
  let inFlight = 0;
  const waiting: Waiting[] = [];

  async function decideGroup(group: Waiting[]): Promise<void> {
    const callers = group.filter((w) => {
      try {
        w.checkCaller();
        return true;
      } catch (err) {
        w.reject(err);
        return false;
      }
    });
    const decided = new Map<number, RecordResponseInit>();
    if (callers.length > 1) {
      try {
        await batch(
          callers.map((w) => w.req),
          decided,
          callers.map((w) => w.traceContext),
        );
      } catch {
        // Whatever the batch committed is answered; the rest goes one by one below.
      }
    }
    await Promise.all(
      callers.map(async (w, i) => {
        const answer = decided.get(i);
        if (answer) return w.resolve(answer);
        try {
          w.resolve(await w.alone());
        } catch (err) {
          w.reject(err);
        }
      }),
    );
  }

  // The next group belongs to no one caller's trace.
  const next = detached((): void => {
    const group = waiting.splice(0, maxGroup);
    if (group.length === 0) {
      inFlight--;
      return;
    }
    void decideGroup(group).finally(next);
  });

  return async (req: RecordRequest, context: HandlerContext) => {
    if (inFlight < lanes) {
      inFlight++;
      try {
        return await record(req, context);
      } finally {
        next();
      }
    }
    // The caller's context (deadline, trace), for what runs on its behalf later.
    const caller = new AsyncResource("RecordGroup");
    return new Promise<RecordResponseInit>((resolve, reject) => {
      waiting.push({
        req,
        traceContext: currentTraceparent(),
        alone: () => caller.runInAsyncScope(() => record(req, context) as Promise<RecordResponseInit>),
        checkCaller: () => caller.runInAsyncScope(throwIfCallerGaveUp),
        resolve,
        reject,
      });
    });
  };
}

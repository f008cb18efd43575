import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { BulkUpdateIncidentsRequest, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { DomainError, FailedPreconditionError, InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import type { IncidentsDeps } from "./deps.js";
import { afterIncident, decodeCursor, encodeCursor, incidentFilterWhere } from "./list-and-get.js";
import { createStateMoves } from "./resolve-and-archive.js";
import { type ActionOutcome, type Actor, createResponderActions, ownerNamed } from "./respond.js";

/** The most incidents one bulk call acts on (and the most ids it takes). */
export const MAX_BULK_INCIDENTS = 500;

const ACTIONS = ["acknowledge", "assign", "resolve", "archive"] as const;
type BulkAction = (typeof ACTIONS)[number];

type BulkOutcome = ActionOutcome | "not_found" | "refused";

/**
 * Acts on many incidents, one at a time, through the very functions the single-incident RPCs use:
 * each incident gets the same compare-and-set, timeline entry, audit record and events, so a
 * concurrent delivery, a second replica's identical call or a colleague's click is ordered by the
 * database exactly as with single actions (one entry per incident, whoever wins). Ids are looked up
 * inside the caller's organization only: another organization's incident answers not_found and is
 * never touched. A failure on one incident never holds back the others; it is its result. A call
 * that runs out of its time budget (timeBudget) stops between two incidents and answers what it did
 * and how to continue: `remainingIds`, or `nextCursor` after the last incident acted on.
 */
export function createBulkHandlers(
  deps: Pick<IncidentsDeps, "sql" | "config" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "bulkUpdateIncidents"> {
  const { sql, clients } = deps;
  const responder = createResponderActions(deps);
  const moveTo = createStateMoves(deps);

  async function actionFor(req: BulkUpdateIncidentsRequest, context: HandlerContext): Promise<(actor: Actor, id: string) => Promise<ActionOutcome>> {
    const action = req.action as BulkAction;
    if (!ACTIONS.includes(action)) throw new InvalidArgumentError(`action must be one of ${ACTIONS.join(", ")}`);
    if (action !== "assign" && req.ownerId !== "") throw new InvalidArgumentError(`ownerId goes with action assign, not ${action}: leave it out`);
    switch (action) {
      case "acknowledge":
        return (actor, id) => responder.acknowledge(actor, id);
      case "resolve":
        return (actor, id) => moveTo("resolved", actor, id);
      case "archive":
        return (actor, id) => moveTo("archived", actor, id);
      case "assign": {
        if (req.ownerId === "") throw new InvalidArgumentError(`action assign needs ownerId: take a member's id from GET /o/${req.org}/members`);
        // The member is found once, with the caller's credential, as the single action does.
        const owner = await ownerNamed(clients, context, req.org, req.ownerId);
        return (actor, id) => responder.setOwner(actor, id, owner);
      }
    }
  }

  return {
    async bulkUpdateIncidents(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const byIds = req.ids.length > 0;
      if (byIds === (req.filter !== undefined)) {
        throw new InvalidArgumentError("give either ids (the incidents to act on) or filter (every incident matching it), not both and not neither");
      }
      if (byIds && (req.limit !== 0 || req.cursor !== "")) throw new InvalidArgumentError("limit and cursor go with filter; with ids every id is acted on");
      const limit = req.limit === 0 ? MAX_BULK_INCIDENTS : req.limit;
      if (limit < 1 || limit > MAX_BULK_INCIDENTS) throw new InvalidArgumentError(`limit must be between 1 and ${MAX_BULK_INCIDENTS}`);
      const act = await actionFor(req, context);

      let ids: string[];
      let matched: number;
      let nextCursor: string | undefined;
      if (byIds) {
        ids = [...new Set(req.ids)];
        matched = ids.length;
      } else {
        const where = incidentFilterWhere(sql, principal.orgId, req.filter!);
        const after = afterIncident(sql, principal.orgId, req.cursor ? decodeCursor("i", req.cursor) : undefined);
        // Newest first, as the list shows them; the cursor continues after the last one acted on, so
        // an action that leaves an incident matching (acknowledge without acknowledged=no) never
        // selects it twice.
        const rows = await sql<{ id: string; matched: number }[]>`
          select i.id, count(*) over ()::int as matched from incidents.incidents i where ${where} ${after}
          order by i.opened_at desc, i.id desc limit ${limit + 1}`;
        matched = rows[0]?.matched ?? 0;
        ids = rows.slice(0, limit).map((r) => r.id);
        if (rows.length > limit) nextCursor = encodeCursor("i", ids.at(-1)!);
      }

      if (req.preview) return { results: [], matched };
      const actor = { orgId: principal.orgId, email: principal.email };
      const budget = timeBudget(context.timeoutMs(), deps.config.BULK_ACTION_BUDGET_SECONDS * 1000);
      const results: { id: string; outcome: BulkOutcome; reason?: string }[] = [];
      let outOfTime = false;
      for (const id of ids) {
        if (context.signal.aborted) break;
        if (results.length > 0 && !budget.fitsAnother()) {
          outOfTime = true;
          break;
        }
        const started = Date.now();
        results.push({ id, ...(await outcomeOf(() => act(actor, id))) });
        budget.took(Date.now() - started);
      }
      // A caller gone mid-call learns nothing more; what was done stays done, and a second call
      // answers it "unchanged".
      if (outOfTime) {
        // The continuation: the ids not started, or the filter's cursor after the last acted on.
        if (byIds) return { results, matched, outOfTime, remainingIds: ids.slice(results.length) };
        return { results, matched, outOfTime, nextCursor: encodeCursor("i", results.at(-1)!.id) };
      }
      return { results, matched, ...(nextCursor ? { nextCursor } : {}) };
    },
  };
}

/** The least time kept back from the caller's deadline for the answer's way back. */
const ANSWER_RESERVE_MS = 250;

/**
 * A bulk call's time: it ends at the caller's deadline less a reserve for the answer (a tenth of
 * the time left, at least ANSWER_RESERVE_MS), or after `ceilingMs`, whichever comes first. Another
 * incident is started only when the slowest one so far would still end inside it: at the pace seen
 * so far, no incident is begun that the caller would not hear about. (The first is always begun;
 * one incident slower than the whole deadline still ends in DeadlineExceeded, its own transaction
 * either committed or not.)
 */
function timeBudget(callerRemainingMs: number | undefined, ceilingMs: number, now = Date.now()) {
  const own = now + ceilingMs;
  const end = callerRemainingMs === undefined ? own : Math.min(own, now + callerRemainingMs - Math.max(ANSWER_RESERVE_MS, callerRemainingMs / 10));
  let slowest = 0;
  return {
    end,
    /** Whether one more incident, as slow as the slowest so far, would end inside the budget. */
    fitsAnother: (at = Date.now()) => at + slowest <= end,
    took(ms: number) {
      slowest = Math.max(slowest, ms);
    },
  };
}

/** One incident's result: what the action did, or why it did nothing. */
async function outcomeOf(action: () => Promise<ActionOutcome>): Promise<{ outcome: BulkOutcome; reason?: string }> {
  try {
    return { outcome: await action() };
  } catch (err) {
    if (err instanceof NotFoundError) return { outcome: "not_found" };
    if (err instanceof FailedPreconditionError) return { outcome: "refused", reason: err.message };
    if (err instanceof DomainError) return { outcome: "refused", reason: `${err.message} (call again for this incident)` };
    throw err;
  }
}

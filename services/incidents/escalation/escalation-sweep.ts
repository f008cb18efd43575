import { createSweepLoop } from "../../runtime/concurrency/sweep-loop.js";
import type { Sql } from "../../runtime/data/database.js";
import type { Logger } from "../../runtime/observability/logger.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { outboxRows } from "../domain-events.js";
import { commaSeparated } from "../store.js";

/** Passed steps one sweep statement claims at most; a larger backlog takes more statements. */
const SWEEP_BATCH = 500;
/** Statements one sweep runs at most; what is left waits for the next sweep. */
const BATCHES_PER_SWEEP = 20;

/** A passed step: what its incident.unacknowledged event says of it, and what the sweep needs besides. */
type DueStepRow = Pick<Parameters<typeof outboxRows.unacknowledged>[0], "title" | "severity" | "source" | "step" | "steps" | "minutes"> & {
  incident_id: string;
  org_id: string;
  due_at: Date;
  window_id: string | null;
  now: Date;
};

export interface EscalationSweepResult {
  /** Steps that emitted incident.unacknowledged. */
  emitted: number;
  /** Steps a maintenance window covered: held, never sent. */
  suppressed: number;
  /** Earlier steps passed in the same sweep as a later one of the same incident: only the latest is sent. */
  skipped: number;
}

export interface EscalationSweeper {
  sweep(): Promise<EscalationSweepResult>;
  /** Sweeps every `intervalSeconds`, the first one at once. */
  start(intervalSeconds: number): void;
  stop(): Promise<void>;
}

type Outcome = "emitted" | "suppressed" | "skipped";

/**
 * The acknowledgement-deadline sweep. Every replica runs it; a step is claimed by inserting its
 * row into `escalation_steps`, whose primary key (incident, step) lets one statement win, and the
 * same statement writes the step's timeline entry and events only for the rows it inserted. The
 * deadlines are the database clock's (opened_at + minutes), so a restart, a late sweep or a
 * replica with a wrong clock changes when a step is noticed, never how many times it is sent.
 */
export function createEscalationSweeper(deps: { sql: Sql; outbox: Pick<Outbox, "poke">; logger: Logger }): EscalationSweeper {
  const { sql, outbox, logger } = deps;

  /** Passed steps not yet held, oldest deadline first, with the maintenance window covering each. */
  function dueSteps(): Promise<DueStepRow[]> {
    // A window covers a step when it matches the incident and was active at some moment between
    // the deadline and now: a sweep that comes late still honours the window that was on.
    return sql<DueStepRow[]>`
      select i.id as incident_id, i.org_id, i.title, i.severity, i.source, s.step::int, cardinality(p.minutes)::int as steps, s.minutes,
        i.opened_at + make_interval(mins => s.minutes) as due_at, now() as now,
        (select w.id from incidents.maintenance_windows w
          where w.org_id = i.org_id and w.starts_at <= now() and w.ends_at > i.opened_at + make_interval(mins => s.minutes)
            and (cardinality(w.sources) = 0 or i.source = any(w.sources))
            and (jsonb_array_length(w.entities) = 0
              or (i.entity_kind is not null and w.entities @> jsonb_build_array(jsonb_build_object('kind', i.entity_kind, 'id', i.entity_id))))
          order by w.starts_at, w.id limit 1) as window_id
      from incidents.escalation_policies p
      join incidents.incidents i on i.org_id = p.org_id and i.severity = p.severity and i.state = 'open' and i.acknowledged_at is null
      cross join lateral unnest(p.minutes) with ordinality as s(minutes, step)
      where i.opened_at + make_interval(mins => s.minutes) <= now()
        and not exists (select 1 from incidents.escalation_steps e where e.incident_id = i.id and e.step >= s.step)
      order by due_at, i.id, s.step
      limit ${SWEEP_BATCH}`;
  }

  /** Claims the rows and, for those this statement inserted, writes the entries and events. Answers the claimed outcomes. */
  async function claim(rows: DueStepRow[]): Promise<Outcome[]> {
    // Of an incident's passed steps only the latest is sent: a sweep after an outage (or a policy
    // set on old incidents) notifies once per incident, not once per missed step.
    const latest = new Map<string, number>();
    for (const r of rows) latest.set(r.incident_id, Math.max(latest.get(r.incident_id) ?? 0, r.step));
    const outcomeOf = (r: DueStepRow): Outcome => (r.step < latest.get(r.incident_id)! ? "skipped" : r.window_id ? "suppressed" : "emitted");
    const steps = rows.map((r) => {
      const summary = `Not acknowledged ${r.minutes} minutes after opening (step ${r.step} of ${r.steps})`;
      const data = { step: r.step, steps: r.steps, minutes: r.minutes, deadline: r.due_at.toISOString() };
      return sql`(${r.incident_id}::uuid, ${r.step}::int, ${r.minutes}::int, ${r.due_at}::timestamptz, ${outcomeOf(r)}::text,
        ${r.window_id}::uuid, ${summary}::text, ${sql.json(data)}::jsonb, ${r.now}::timestamptz)`;
    });
    const events = rows.flatMap((r) => {
      if (outcomeOf(r) !== "emitted") return [];
      const e = { orgId: r.org_id, incidentId: r.incident_id, at: r.now };
      return [
        outboxRows.unacknowledged({
          ...e,
          title: r.title,
          severity: r.severity,
          source: r.source,
          step: r.step,
          steps: r.steps,
          minutes: r.minutes,
          deadline: r.due_at,
        }),
        outboxRows.timelineRecorded({ ...e, kind: "unacknowledged" }),
      ].map((o) => sql`(${r.incident_id}::uuid, ${r.step}::int, ${o.subject}::text, ${o.payload}::bytea)`);
    });
    const eventValues = events.length > 0 ? commaSeparated(sql, events) : sql`(null::uuid, null::int, null::text, null::bytea)`;
    // The incidents are share-locked and re-read: an acknowledgement or a resolve that commits
    // first stops the step; one that comes after finds the step already held.
    const claimed = await sql<{ outcome: Outcome }[]>`
      with v (incident_id, step, minutes, due_at, outcome, window_id, summary, data, at) as (
        values ${commaSeparated(sql, steps)}
      ), target as (
        select i.id from incidents.incidents i
        where i.id in (select incident_id from v) and i.state = 'open' and i.acknowledged_at is null
        order by i.id
        for share
      ), claimed as (
        insert into incidents.escalation_steps (incident_id, step, minutes, due_at, outcome, maintenance_window_id)
        select v.incident_id, v.step, v.minutes, v.due_at, v.outcome, v.window_id from v where v.incident_id in (select id from target)
        on conflict (incident_id, step) do nothing
        returning incident_id, step, outcome
      ), entries as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
        select v.incident_id, 'unacknowledged', v.at, v.summary, v.data
        from v join claimed c on c.incident_id = v.incident_id and c.step = v.step
        where c.outcome = 'emitted'
      ), events as (
        insert into incidents.outbox (subject, payload)
        select e.subject, e.payload
        from (values ${eventValues}) as e (incident_id, step, subject, payload)
        join claimed c on c.incident_id = e.incident_id and c.step = e.step
        where c.outcome = 'emitted'
      )
      select outcome from claimed`;
    return claimed.map((c) => c.outcome);
  }

  async function sweep(): Promise<EscalationSweepResult> {
    const result: EscalationSweepResult = { emitted: 0, suppressed: 0, skipped: 0 };
    for (let batch = 0; batch < BATCHES_PER_SWEEP; batch++) {
      const rows = await dueSteps();
      if (rows.length === 0) break;
      const outcomes = await claim(rows);
      for (const outcome of outcomes) result[outcome]++;
      if (result.emitted > 0) outbox.poke();
      // Rows another replica claimed meanwhile are gone from the next read.
      if (rows.length < SWEEP_BATCH) break;
    }
    if (result.emitted + result.suppressed + result.skipped > 0) logger.info(result, "escalation sweep");
    return result;
  }

  const loop = createSweepLoop(sweep, (err) => logger.warn({ err: String(err) }, "escalation sweep failed; the next one retries"));
  return { sweep, start: loop.start, stop: loop.stop };
}

import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { HeartbeatSilentSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { Sql } from "../runtime/data/database.js";
import { EVENTS, recordAudit, type AuditRecord } from "../runtime/transport/events.js";
import type { Logger } from "../runtime/observability/logger.js";
import type { Outbox } from "../runtime/data/outbox.js";

/** The run key of a run without a run_id: one such run at a time per heartbeat. */
export const NO_RUN_ID = "00000000-0000-0000-0000-000000000000";

/**
 * What the management routes, the sweep and the silence deliveries need from the heartbeats
 * tables. The ping and its history write their own statements (the hot path is one round trip).
 */

/** A heartbeat row as the management routes read it. */
/**
 * The deadline of a paused heartbeat, and the overrun time of its runs: far enough that no sweep
 * reaches it, finite so that every reader (the previous release's included) can show it.
 */
export const PAUSED_DEADLINE = new Date("9999-01-01T00:00:00Z");

export interface HeartbeatRow {
  id: string;
  org_id: string;
  name: string;
  expected_interval_seconds: number | null;
  grace_seconds: number;
  schedule: string | null;
  timezone: string | null;
  max_run_seconds: number | null;
  min_run_seconds: number | null;
  alert_after_misses: number;
  /** The incident of the silence (or failure, or overrun) in progress, once delivered. */
  open_incident_id: string | null;
  created_at: Date;
  last_seen_at: Date | null;
  deadline: Date;
  silent: boolean;
  /** Since when it is paused: no silence is declared until a ping or an admin resumes it. */
  paused_at: Date | null;
  last_ping_at: Date | null;
  last_ping_kind: string | null;
  last_ping_exit_status: number | null;
  last_ping_run_seconds: number | null;
  last_ping_body: string | null;
  last_ping_body_cut: boolean | null;
  last_ping_body_bytes: number | null;
  running_since: Date | null;
  /** The ping key sealed under the secrets key, and the id of the key that sealed it. */
  ping_key_sealed: Buffer | null;
  ping_key_sealed_by: string | null;
}

/** What a heartbeat expects: a ping every `interval` seconds, or one on a cron schedule. */
export interface Expectation {
  interval: number | null;
  schedule: string | null;
  timezone: string | null;
  /** Expected pings in a row that may be missed before the silence: the deadline is the last of them plus grace. */
  misses: number;
}

export interface NewHeartbeat extends Expectation {
  orgId: string;
  orgSlug: string;
  name: string;
  /** With a schedule: an upper bound of the time between two scheduled runs. */
  gapSeconds: number | null;
  grace: number;
  maxRun: number | null;
  minRun: number | null;
  pingKey: StoredPingKey;
}

/** A ping key as it is stored: its hash and its sealed copy, never the key. */
export interface StoredPingKey {
  hash: string;
  sealed: Buffer;
  sealedBy: string;
}

/** A heartbeat as an update finds it, locked until the update commits. */
export interface CurrentHeartbeat extends Expectation {
  grace: number;
  maxRun: number | null;
  minRun: number | null;
  /** The last ping, or the registration when none came yet: where the deadline counts from. */
  since: Date;
  paused: boolean;
}

export interface HeartbeatChange extends Expectation {
  /** A new gap for a schedule; null keeps the one stored (or clears it without a schedule). */
  gapSeconds: number | null;
  grace: number;
  /** undefined keeps the limit, null removes it. */
  maxRun: number | null | undefined;
  /** undefined keeps the limit, null removes it. */
  minRun: number | null | undefined;
  deadline: Date;
  /** true pauses, false resumes, undefined keeps it as it is. */
  paused?: boolean | undefined;
}

export type SilenceCause = "silence" | "fail" | "overrun" | "quick";

/** A silence whose alert this pass delivers, with its heartbeat. */
export interface ClaimedAlert {
  id: string;
  cause: SilenceCause;
  deadline: Date;
  since: Date;
  never_pinged: boolean;
  org_id: string;
  org_slug: string;
  name: string;
  expected_interval_seconds: number | null;
  schedule: string | null;
  timezone: string | null;
  grace_seconds: number;
  max_run_seconds: number | null;
  min_run_seconds: number | null;
  alert_after_misses: number;
  silent_seconds: number;
  exit_status: number | null;
  body: string | null;
  body_cut: boolean | null;
  body_bytes: number | null;
  run_id: string | null;
  suppressed_by: string | null;
  db_now: Date;
  /** For a silence: the heartbeat's last ping when it was declared, and a run started and not finished. */
  last_kind: string | null;
  last_ping_at: Date | null;
  last_run_seconds: number | null;
  unfinished_start: Date | null;
  /** For a silence declared while a failure or an overrun was open: that one's cause. */
  during: SilenceCause | null;
}

/** A silence a ping ended whose `resumed` this pass delivers. */
export interface ClaimedResume {
  id: string;
  cause: SilenceCause;
  since: Date;
  org_id: string;
  org_slug: string;
  name: string;
  ended_at: Date;
  silent_seconds: number;
  ended_body: string | null;
  ended_body_cut: boolean | null;
  ended_body_bytes: number | null;
  ended_run_seconds: number | null;
}

/** What the incident core answered for one alert. */
export interface RecordedAlert {
  id: string;
  outcome: string;
  incidentId: string;
  /** Set when a maintenance window suppressed the alert: when to offer it again. */
  suppressedUntil: Date | null;
  suppressedBy: string | null;
}

/** A claim: a lease of `leaseSeconds` under `token` on at most `limit` silences. */
export interface Claim {
  token: string;
  /** Only this silence, when given. */
  onlySilenceId: string | undefined;
  limit: number;
  leaseSeconds: number;
}

/** The organization has as many heartbeats as `register` was allowed to let it have. */
export class OrganizationFullError extends Error {
  constructor(readonly atMost: number) {
    super(`the organization has ${atMost} heartbeats`);
    this.name = "OrganizationFullError";
  }
}

export interface HeartbeatStore {
  /**
   * Inserts a heartbeat and its audit record in one transaction; `deadlineFrom` gets the database
   * clock (the row's created_at). Undefined when the organization has a heartbeat of that name.
   * With `atMost`, throws OrganizationFullError when the organization has that many heartbeats
   * already (counted under a per-organization lock, so concurrent registrations cannot pass it).
   */
  register(
    heartbeat: NewHeartbeat,
    deadlineFrom: (now: Date) => Date,
    audit: (row: HeartbeatRow) => AuditRecord,
    atMost?: number,
  ): Promise<HeartbeatRow | undefined>;
  /** A page of the organization's heartbeats by name, after `after` when given. */
  list(orgId: string, after: string | undefined, limit: number): Promise<HeartbeatRow[]>;
  get(orgId: string, name: string): Promise<HeartbeatRow | undefined>;
  /**
   * Locks the heartbeat, applies what `change` makes of it and writes the audit record, in one
   * transaction (an error thrown by `change` rolls it back). Undefined when there is no such heartbeat.
   */
  update(
    orgId: string,
    name: string,
    change: (current: CurrentHeartbeat) => HeartbeatChange,
    audit: (row: HeartbeatRow) => AuditRecord,
  ): Promise<HeartbeatRow | undefined>;
  /**
   * Replaces the heartbeat's ping key and writes the audit record in one transaction; the old key
   * matches nothing from the commit on. Undefined when there is no such heartbeat.
   */
  rotatePingKey(orgId: string, name: string, key: StoredPingKey, audit: AuditRecord): Promise<HeartbeatRow | undefined>;
  /**
   * Sets the organization's ping key (replacing any earlier one at once) and writes the audit
   * record, in one transaction.
   */
  issueOrgPingKey(orgId: string, orgSlug: string, hash: string, allowCreate: boolean, audit: AuditRecord): Promise<void>;
  /** Up to `limit` heartbeats without a ping key (registered before keys existed). */
  keyless(limit: number): Promise<{ org_id: string; name: string }[]>;
  /** Gives a keyless heartbeat its key; false when it has one already (another process was first). */
  giveKey(orgId: string, name: string, key: StoredPingKey): Promise<boolean>;
  /** Deletes the heartbeat and writes the audit record; false when there is no such heartbeat. */
  delete(orgId: string, name: string, audit: AuditRecord): Promise<boolean>;

  /**
   * Declares silent up to `limit` heartbeats past their deadline that are not silent already,
   * with a `heartbeat.silent` event each; answers how many.
   */
  detectSilences(limit: number): Promise<number>;
  /** Declares "ran too long" up to `limit` runs past their limit; answers how many. */
  detectOverruns(limit: number): Promise<number>;
  /** Forgets finished silences and abandoned runs older than `keepDays`. */
  cleanup(keepDays: number): Promise<void>;

  /**
   * Claims alerts to deliver: those never recorded, and those a maintenance window suppressed
   * whose recheck time has come while the heartbeat is still silent.
   */
  claimAlerts(claim: Claim): Promise<ClaimedAlert[]>;
  /** Marks alerts delivered, and ends their claim; only rows still claimed under `token`. */
  markAlertsRecorded(token: string, recorded: RecordedAlert[]): Promise<void>;
  /** Claims silences a ping ended whose `resumed` is not recorded yet, once their alert is. */
  claimResumes(claim: Claim): Promise<ClaimedResume[]>;
  markResumeRecorded(token: string, silenceId: string, outcome: string): Promise<void>;
  /**
   * Ends the lease now but keeps `token` on the rows, so the same pass does not pick them again;
   * the next pass (another token) retries them.
   */
  release(token: string, silenceIds: string[]): Promise<void>;
}

/** The columns of HeartbeatRow, for `select` and `returning` on heartbeats.heartbeats (no alias). */
function heartbeatColumns(sql: Sql) {
  // "Silent" once a sweep has declared it, or as soon as the deadline is behind us.
  return sql`id, org_id, name, expected_interval_seconds, grace_seconds, schedule, timezone, max_run_seconds, min_run_seconds,
    alert_after_misses, (select s.incident_id from heartbeats.silences s where s.id = heartbeats.open_silence_id) as open_incident_id,
    created_at, last_seen_at,
    deadline, (open_silence_id is not null or deadline < now()) as silent, paused_at,
    last_ping_at, last_ping_kind, last_ping_exit_status, last_ping_run_seconds, last_ping_body, last_ping_body_cut, last_ping_body_bytes,
    (select min(r.started_at) from heartbeats.runs r where r.heartbeat_id = heartbeats.id) as running_since,
    ping_key_sealed, ping_key_sealed_by`;
}

interface DetectedRow {
  org_id: string;
  name: string;
  now: Date;
  silent_seconds: number;
}

/** The heartbeats store on Postgres; events and audit records go to `outbox` in the same transactions. */
export function createPostgresHeartbeatStore(deps: { sql: Sql; outbox: Outbox; logger: Logger }): HeartbeatStore {
  const { sql, outbox, logger } = deps;
  const columns = heartbeatColumns(sql);

  return {
    async register(heartbeat, deadlineFrom, audit, atMost) {
      return sql.begin(async (tx) => {
        if (atMost !== undefined) {
          await tx`select pg_advisory_xact_lock(hashtext(${`heartbeats.register:${heartbeat.orgId}`}))`;
          const [held] = await tx<{ named: boolean; count: number }[]>`
            select exists (select 1 from heartbeats.heartbeats where org_id = ${heartbeat.orgId} and name = ${heartbeat.name}) as named,
                   (select count(*)::int from heartbeats.heartbeats where org_id = ${heartbeat.orgId}) as count`;
          if (held!.named) return undefined;
          if (held!.count >= atMost) throw new OrganizationFullError(atMost);
        }
        // The database clock: created_at is this transaction's now().
        const [clock] = await tx<{ now: Date }[]>`select now() as now`;
        const deadline = deadlineFrom(clock!.now);
        const [inserted] = await tx<HeartbeatRow[]>`
          insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, schedule, timezone,
            schedule_gap_seconds, max_run_seconds, min_run_seconds, alert_after_misses, deadline, ping_key_hash, ping_key_sealed, ping_key_sealed_by)
          values (${heartbeat.orgId}, ${heartbeat.orgSlug}, ${heartbeat.name}, ${heartbeat.interval}, ${heartbeat.grace}, ${heartbeat.schedule},
            ${heartbeat.timezone}, ${heartbeat.gapSeconds}, ${heartbeat.maxRun}, ${heartbeat.minRun}, ${heartbeat.misses}, ${deadline},
            ${heartbeat.pingKey.hash}, ${heartbeat.pingKey.sealed}, ${heartbeat.pingKey.sealedBy})
          on conflict (org_id, name) do nothing
          returning ${columns}`;
        if (!inserted) return undefined;
        await recordAudit(outbox, tx, audit(inserted));
        return inserted;
      });
    },

    async list(orgId, after, limit) {
      return sql<HeartbeatRow[]>`
        select ${columns} from heartbeats.heartbeats where org_id = ${orgId} ${after === undefined ? sql`` : sql`and name > ${after}`}
        order by name limit ${limit}`;
    },

    async get(orgId, name) {
      const [row] = await sql<HeartbeatRow[]>`select ${columns} from heartbeats.heartbeats where org_id = ${orgId} and name = ${name}`;
      return row;
    },

    async update(orgId, name, change, audit) {
      return sql.begin(async (tx) => {
        const [current] = await tx<CurrentHeartbeat[]>`
          select expected_interval_seconds as "interval", schedule, timezone, alert_after_misses as misses, grace_seconds as grace,
            max_run_seconds as "maxRun", min_run_seconds as "minRun", coalesce(last_seen_at, created_at) as since, paused_at is not null as paused
          from heartbeats.heartbeats where org_id = ${orgId} and name = ${name} for update`;
        if (!current) return undefined;
        const next = change(current);
        const [updated] = await tx<HeartbeatRow[]>`
          update heartbeats.heartbeats set
            expected_interval_seconds = ${next.interval},
            schedule = ${next.schedule},
            timezone = ${next.timezone},
            schedule_gap_seconds = ${next.schedule ? sql`coalesce(${next.gapSeconds}::integer, schedule_gap_seconds)` : null},
            grace_seconds = ${next.grace},
            max_run_seconds = ${next.maxRun === undefined ? sql`max_run_seconds` : next.maxRun},
            min_run_seconds = ${next.minRun === undefined ? sql`min_run_seconds` : next.minRun},
            alert_after_misses = ${next.misses},
            deadline = ${next.deadline},
            paused_at = ${next.paused === undefined ? sql`paused_at` : next.paused ? sql`coalesce(paused_at, now())` : null}
          where org_id = ${orgId} and name = ${name}
          returning ${columns}`;
        // A paused heartbeat's runs in progress cannot overrun; resumed, they count from now.
        if (next.paused === true) {
          await tx`update heartbeats.runs set overrun_at = ${PAUSED_DEADLINE} where heartbeat_id = ${updated!.id} and overrun_silence_id is null`;
        } else if (next.paused === false && current.paused) {
          await tx`
            update heartbeats.runs set overrun_at = now() + make_interval(secs => ${updated!.max_run_seconds}::integer)
            where heartbeat_id = ${updated!.id} and overrun_silence_id is null and overrun_at = ${PAUSED_DEADLINE}`;
        }
        await recordAudit(outbox, tx, audit(updated!));
        return updated!;
      });
    },

    async rotatePingKey(orgId, name, key, audit) {
      return sql.begin(async (tx) => {
        const [updated] = await tx<HeartbeatRow[]>`
          update heartbeats.heartbeats set ping_key_hash = ${key.hash}, ping_key_sealed = ${key.sealed}, ping_key_sealed_by = ${key.sealedBy}
          where org_id = ${orgId} and name = ${name}
          returning ${columns}`;
        if (!updated) return undefined;
        await recordAudit(outbox, tx, audit);
        return updated;
      });
    },

    async issueOrgPingKey(orgId, orgSlug, hash, allowCreate, audit) {
      await sql.begin(async (tx) => {
        await tx`
          insert into heartbeats.org_ping_keys (org_id, org_slug, key_hash, allow_create) values (${orgId}, ${orgSlug}, ${hash}, ${allowCreate})
          on conflict (org_id) do update set key_hash = excluded.key_hash, allow_create = excluded.allow_create, issued_at = now()`;
        await recordAudit(outbox, tx, audit);
      });
    },

    async keyless(limit) {
      return sql<{ org_id: string; name: string }[]>`
        select org_id, name from heartbeats.heartbeats where ping_key_hash is null order by org_id, name limit ${limit}`;
    },

    async giveKey(orgId, name, key) {
      const given = await sql`
        update heartbeats.heartbeats set ping_key_hash = ${key.hash}, ping_key_sealed = ${key.sealed}, ping_key_sealed_by = ${key.sealedBy}
        where org_id = ${orgId} and name = ${name} and ping_key_hash is null
        returning id`;
      return given.length > 0;
    },

    async delete(orgId, name, audit) {
      return sql.begin(async (tx) => {
        const deleted = await tx`delete from heartbeats.heartbeats where org_id = ${orgId} and name = ${name} returning id`;
        if (deleted.length === 0) return false;
        await recordAudit(outbox, tx, audit);
        return true;
      });
    },

    /**
     * One statement per batch: rows are locked with SKIP LOCKED and `open_silence_id` is set in
     * the same statement that creates the silence, so concurrent sweeps split the rows and a
     * silence is detected once. The silence row is committed before anything is delivered; a
     * crash after this point leaves it pending for the next sweep.
     */
    async detectSilences(limit) {
      return sql.begin(async (tx) => {
        // How the heartbeat's last run ended and a run left unfinished go with the silence, read now.
        const lastPing = sql`h.last_end_kind as last_ping_kind, h.last_end_at as last_ping_at, h.last_end_exit_status as last_ping_exit_status,
              h.last_end_run_seconds as last_ping_run_seconds, h.last_end_body as last_ping_body, h.last_end_body_cut as last_ping_body_cut,
              h.last_end_body_bytes as last_ping_body_bytes,
              (select max(r.started_at) from heartbeats.runs r where r.heartbeat_id = h.id) as unfinished_start`;
        const rows = await tx<DetectedRow[]>`
          with due as (
            select h.id, h.ctid as row_ctid, h.deadline, coalesce(h.last_seen_at, h.created_at) as since, h.last_seen_at is null as never_pinged,
              ${lastPing}
            from heartbeats.heartbeats h
            where h.open_silence_id is null and h.deadline < now()
            order by h.deadline
            limit ${limit}
            for update skip locked
          ), opened as (
            insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, last_kind, last_ping_at, exit_status,
              last_run_seconds, body, body_cut, body_bytes, unfinished_start)
            select id, deadline, since, never_pinged, last_ping_kind, last_ping_at, last_ping_exit_status,
              last_ping_run_seconds, last_ping_body, last_ping_body_cut, last_ping_body_bytes, unfinished_start from due
            returning id, heartbeat_id, since
          )
          -- The rows are locked, so their ctids hold: a TID scan, where a join on id would read the
          -- whole table into a hash (100,000 rows for 1,000 due).
          update heartbeats.heartbeats h set open_silence_id = opened.id
          from opened where h.ctid = any(array(select row_ctid from due)) and h.id = opened.heartbeat_id
          returning h.org_id, h.name, now() as now, extract(epoch from now() - opened.since)::float8 as silent_seconds`;
        // A heartbeat whose failure or overrun is still open and that has now also stopped pinging:
        // the silence is declared all the same and becomes its open silence (its alert attaches to
        // that incident), and the failure ends without a resume of its own. Found through the
        // few open failures, not the heartbeats.
        const left = limit - rows.length;
        if (left > 0) {
          const over = await tx<DetectedRow[]>`
            with due as (
              select h.id, h.deadline, coalesce(h.last_seen_at, h.created_at) as since, h.last_seen_at is null as never_pinged,
                s.id as open_id, s.cause as open_cause, ${lastPing}
              from heartbeats.silences s
              join heartbeats.heartbeats h on h.id = s.heartbeat_id and h.open_silence_id = s.id
              where s.cause <> 'silence' and s.ended_at is null and h.deadline < now()
              order by h.deadline
              limit ${left}
              for update of h skip locked
            ), opened as (
              insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, last_kind, last_ping_at, exit_status,
                last_run_seconds, body, body_cut, body_bytes, unfinished_start, during)
              select id, deadline, since, never_pinged, last_ping_kind, last_ping_at, last_ping_exit_status,
                last_ping_run_seconds, last_ping_body, last_ping_body_cut, last_ping_body_bytes, unfinished_start, open_cause from due
              returning id, heartbeat_id, since
            ), superseded as (
              update heartbeats.silences s set ended_at = now(), resume_recorded_at = now(), resume_outcome = 'superseded'
              from due where s.id = due.open_id
            )
            update heartbeats.heartbeats h set open_silence_id = opened.id
            from opened where h.id = opened.heartbeat_id
            returning h.org_id, h.name, now() as now, extract(epoch from now() - opened.since)::float8 as silent_seconds`;
          rows.push(...over);
        }
        // One statement for the whole batch: a thousand silences cost one round trip, not a thousand.
        await outbox.writeMany(
          tx,
          EVENTS.heartbeatSilent,
          rows.map((row) =>
            create(HeartbeatSilentSchema, {
              orgId: row.org_id,
              name: row.name,
              silentSeconds: BigInt(Math.floor(row.silent_seconds)),
              at: timestampFromDate(row.now),
            }),
          ),
        );
        return rows.length;
      });
    },

    /**
     * Like detectSilences: the run is marked with its silence in the same statement, so it is
     * declared once. The silence becomes the heartbeat's open one unless one is open already;
     * either way its alert is delivered (a second one attaches to the open incident).
     */
    async detectOverruns(limit) {
      const [row] = await sql<{ n: number }[]>`
        with due as (
          select heartbeat_id, run_key, started_at, overrun_at from heartbeats.runs
          where overrun_silence_id is null and overrun_at < now()
          order by overrun_at
          limit ${limit}
          for update skip locked
        ), opened as (
          insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, cause, run_id)
          select heartbeat_id, overrun_at, started_at, false, 'overrun', nullif(run_key, ${NO_RUN_ID}::uuid) from due
          returning id, heartbeat_id, coalesce(run_id, ${NO_RUN_ID}::uuid) as run_key
        ), marked as (
          update heartbeats.runs r set overrun_silence_id = opened.id
          from opened where r.heartbeat_id = opened.heartbeat_id and r.run_key = opened.run_key
        ), pointed as (
          update heartbeats.heartbeats h set open_silence_id = opened.id
          from opened where h.id = any(array(select heartbeat_id from opened)) and h.id = opened.heartbeat_id and h.open_silence_id is null
        )
        select count(*)::int as n from opened`;
      return row!.n;
    },

    async cleanup(keepDays) {
      // Finished silences, and alerts delivered alongside an open one that no ping will end.
      await sql`
        delete from heartbeats.silences s
        where s.resume_recorded_at < now() - make_interval(days => ${keepDays})
          or (s.ended_at is null and s.alert_recorded_at < now() - make_interval(days => ${keepDays})
              and s.suppressed_until is null
              and not exists (select 1 from heartbeats.heartbeats h where h.open_silence_id = s.id))`;
      // A start never followed by an end: kept past the longest allowed run, then forgotten.
      await sql`delete from heartbeats.runs where started_at < now() - make_interval(days => ${keepDays})`;
    },

    /**
     * A re-offered alert is unmarked as recorded in the claim itself, so its `resumed` waits for
     * it, as for any alert.
     */
    async claimAlerts({ token, onlySilenceId, limit, leaseSeconds }) {
      return sql<ClaimedAlert[]>`
        with never_recorded as (
          select id from heartbeats.silences
          where alert_recorded_at is null
            ${onlySilenceId ? sql`and id = ${onlySilenceId}` : sql``}
            and (claim_until is null or claim_until < now())
            and claim_token is distinct from ${token}
          order by detected_at
          limit ${limit}
          for update skip locked
        ), held_back as (
          select s2.id from heartbeats.silences s2
          where s2.suppressed_until <= now()
            -- Still silent: the heartbeat still points at this silence.
            and exists (select 1 from heartbeats.heartbeats h2 where h2.id = s2.heartbeat_id and h2.open_silence_id = s2.id)
            ${onlySilenceId ? sql`and s2.id = ${onlySilenceId}` : sql``}
            and (s2.claim_until is null or s2.claim_until < now())
            and s2.claim_token is distinct from ${token}
          order by s2.suppressed_until
          limit ${limit}
          for update skip locked
        ), claimed as (
          update heartbeats.silences s set claim_token = ${token}, claim_until = now() + make_interval(secs => ${leaseSeconds}),
            alert_recorded_at = case when s.suppressed_until is not null then null else s.alert_recorded_at end
          where s.id in (select id from never_recorded union all select id from held_back)
          returning s.*
        )
        -- Each heartbeat by its primary key (lateral): a join could hash the whole table.
        select s.id, s.cause, s.deadline, s.since, s.never_pinged, h.org_id, h.org_slug, h.name,
          h.expected_interval_seconds, h.schedule, h.timezone, h.grace_seconds, h.max_run_seconds, h.min_run_seconds, h.alert_after_misses,
          s.exit_status, s.body, s.body_cut, s.body_bytes, s.run_id, s.suppressed_by, now() as db_now,
          s.last_kind, s.last_ping_at, s.last_run_seconds, s.unfinished_start, s.during,
          extract(epoch from coalesce(s.ended_at, now()) - s.since)::float8 as silent_seconds
        from claimed s cross join lateral (select * from heartbeats.heartbeats h where h.id = s.heartbeat_id) h`;
    },

    /**
     * One statement for the batch. Until it commits the silences stay claimed; if it never does,
     * the lease expires and they are handed over again under the same event ids.
     */
    async markAlertsRecorded(token, recorded) {
      if (recorded.length === 0) return;
      await sql`
        update heartbeats.silences s
        set alert_recorded_at = now(), alert_outcome = d.outcome, incident_id = coalesce(nullif(d.incident_id, ''), s.incident_id),
            suppressed_until = d.suppressed_until, suppressed_by = coalesce(d.suppressed_by, s.suppressed_by),
            claim_token = null, claim_until = null
        from unnest(${recorded.map((r) => r.id)}::uuid[], ${recorded.map((r) => r.outcome)}::text[], ${recorded.map((r) => r.incidentId)}::text[],
            ${recorded.map((r) => r.suppressedUntil?.toISOString() ?? null)}::timestamptz[], ${recorded.map((r) => r.suppressedBy)}::text[])
          as d(id, outcome, incident_id, suppressed_until, suppressed_by)
        where s.id = d.id and s.claim_token = ${token}`;
    },

    async claimResumes({ token, onlySilenceId, limit, leaseSeconds }) {
      return sql<ClaimedResume[]>`
        with claimed as (
        update heartbeats.silences s set claim_token = ${token}, claim_until = now() + make_interval(secs => ${leaseSeconds})
        where s.id in (
            select id from heartbeats.silences
            where ended_at is not null and resume_recorded_at is null
              ${onlySilenceId ? sql`and id = ${onlySilenceId}` : sql``}
              -- The alert goes first: a resume whose alert is still pending waits for it.
              and alert_recorded_at is not null
              and (claim_until is null or claim_until < now())
              and claim_token is distinct from ${token}
            order by ended_at
            limit ${limit}
            for update skip locked)
        returning s.*
        )
        select s.id, s.cause, s.since, h.org_id, h.org_slug, h.name, s.ended_at, s.ended_body, s.ended_body_cut, s.ended_body_bytes, s.ended_run_seconds,
          extract(epoch from s.ended_at - s.since)::float8 as silent_seconds
        from claimed s cross join lateral (select * from heartbeats.heartbeats h where h.id = s.heartbeat_id) h`;
    },

    async markResumeRecorded(token, silenceId, outcome) {
      await sql`
        update heartbeats.silences
        set resume_recorded_at = now(), resume_outcome = ${outcome}, claim_token = null, claim_until = null
        where id = ${silenceId} and claim_token = ${token}`;
    },

    async release(token, silenceIds) {
      if (silenceIds.length === 0) return;
      await sql`update heartbeats.silences set claim_until = now() where id = any(${silenceIds}::uuid[]) and claim_token = ${token}`.catch((err) =>
        logger.warn({ err: String(err), silences: silenceIds.length }, "could not release a claim; it expires by itself"),
      );
    },
  };
}

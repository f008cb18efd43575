import { backgroundShouldYield } from "../runtime/concurrency/background-yield.js";
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { timestampDate, timestampNow } from "@bufbuild/protobuf/wkt";
import { EvidenceRecordedSchema, InvestigationCompletedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { Incident } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { CapabilitiesResponse, RawResult } from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { evaluateMetered, fromCelValue, toCelInput } from "../cel/cel-mapping.js";
import type { EventBus } from "../runtime/transport/event-bus.js";
import { EVENTS, onEvent } from "../runtime/transport/events.js";
import { groupCalls } from "../runtime/transport/grouped-calls.js";
import { REMOTE_SOURCE_CHANGED } from "../runtime/transport/broadcast.js";
import { createRevocableCache } from "../runtime/credentials/revocable-cache.js";
import { storableJson, storableText } from "../runtime/data/storable.js";
import { partialResult, ReadRequestError, type SourceClient } from "../remotesource-kit/client/source-client.js";
import { CREDENTIALS_REJECTED, READ_BUDGET_MS } from "../remotesource-kit/protocol/limits.js";
import { toProtocolJson } from "../remotesource-kit/protocol/protocol-json.js";
import { formatWindowValue } from "../remotesource-kit/protocol/window-format.js";
import { RawSeriesSchema, LogEntrySchema } from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { clientFor, recordStatus } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import { capabilitiesOf, compileRead, type CompiledRead, READ_LIMITS, rangeDescriptor, stepSeconds, TEMPLATE_ENVIRONMENT } from "./investigation-reads.js";
import { storedReads, type StoredRead } from "./stored-reads.js";
import type { ConnectionRow, InvestigationRow } from "./store.js";

/**
 * Investigations: when an incident opens, the reads configured on the organization's connections
 * run against their sources, off the delivery path, and each outcome is kept as evidence. A durable
 * consumer of `incident.opened` only records that an investigation is due; a worker claims due
 * investigations from the database and runs them, so a redelivered event, a restarted process or
 * a restarted NATS never loses or doubles one.
 */

export const INVESTIGATION_LIMITS = {
  /** The whole investigation: reads still waiting when it is spent are recorded as partial. */
  totalBudgetMs: 30_000,
  /** Reads of one organization running at once in one process. */
  readsPerOrganization: 4,
  /** Investigations one process runs at once. */
  investigationsPerProcess: 8,
  /**
   * Investigations one process runs at once while its deliveries keep its event loop busy
   * (`background-yield.ts`): they give way to the deliveries, and still progress.
   */
  investigationsWhenBusy: 1,
  /** The raw payload kept per read; a longer one is cut there and marked cut. */
  rawKeptBytes: 64 * 1024,
} as const;

export interface InvestigatorOptions {
  totalBudgetMs?: number;
  readsPerOrganization?: number;
  /** The budget of one read; the remote-source read budget when left out. */
  readBudgetMs?: number;
  pollMs?: number;
}

export interface Investigator {
  start(): void;
  stop(): Promise<void>;
  poke(): void;
}

/**
 * How long a source's capabilities, once read, serve the investigations after: a storm of opens
 * asks a source once, not once per incident. A changed connection (its revision) reads them anew.
 */
const CAPABILITIES_KEPT_MS = 60_000;

/**
 * How long a failed capabilities read is kept: a storm of opens against a failing source asks it
 * once in this while, not once per incident (each ask may wait out the read budget). The reads
 * themselves still run, with the defaults the capabilities would have refined.
 */
const CAPABILITIES_FAILURE_KEPT_MS = 10_000;

/** Connections whose capabilities (or source client) one process keeps at most; the oldest goes first. */
const CONNECTIONS_KEPT = 1_000;

/** How long a source client keeps an idle connection to its source for the next read. */
const SOURCE_KEEP_ALIVE_MS = 30_000;

/** Compiled reads kept per process; past this the cache starts over (reads change rarely). */
const COMPILED_READS_KEPT = 1_000;

/** How long stopping waits for runs in progress. */
const STOP_WAIT_MS = 2_000;

/**
 * A run interrupted on the way (the incident core or the database unreachable, a read whose
 * outcome cannot be stored) is tried again after 3 s, then 6, 12, 24 and 48 (at most 60); after
 * its sixth attempt it stops, `failed` with the reason, and a member may run it again.
 */
export const RUN_RETRY = { attempts: 6, firstWaitSeconds: 3, longestWaitSeconds: 60 } as const;

/** The wait before the next attempt after `attempts` failed ones. */
export function retryWaitSeconds(attempts: number): number {
  return Math.min(RUN_RETRY.firstWaitSeconds * 2 ** Math.max(0, attempts - 1), RUN_RETRY.longestWaitSeconds);
}

/** Characters of a failure's message kept in an investigation's reason. */
const REASON_MAX = 500;

/** Opened incidents one statement records investigations for at most (see groupCalls). */
const RECORD_GROUP = 100;

/**
 * Which organizations have an investigation read, cached per process: the opened incidents of an
 * organization without one cost no statement at all. Every change to an organization's
 * connections (one created, updated or deleted, its reads set) is broadcast on
 * REMOTE_SOURCE_CHANGED to every replica before it is answered, so the first read configured
 * reaches the very next opened incident; while the broadcast is unavailable every answer is looked
 * up (revocable-cache.ts). A cached "some" that went stale costs only the recording statement,
 * which checks the reads again and records nothing.
 */
export function investigatingOrganizations(deps: Pick<RemoteSourceDeps, "sql" | "broadcast">) {
  const cache = createRevocableCache<true>({ broadcast: deps.broadcast, subject: REMOTE_SOURCE_CHANGED });
  const hasReads = (orgId: string) =>
    cache.get(orgId, orgId, async () => {
      const [row] = await deps.sql`select 1 from remotesource.connections where org_id = ${orgId} and investigation_reads <> '[]'::jsonb limit 1`;
      return row ? true : undefined;
    });
  return {
    /** The opened incidents whose organization has an investigation read. */
    async keep<T extends { orgId: string }>(opened: T[]): Promise<T[]> {
      const orgs = [...new Set(opened.map((o) => o.orgId))];
      const answers = await Promise.all(orgs.map(hasReads));
      const investigating = new Set(orgs.filter((_, i) => answers[i]));
      return investigating.size === 0 ? [] : opened.filter((o) => investigating.has(o.orgId));
    },
  };
}

/** Subscribes the durable consumer of `incident.opened` that records run 1 of an investigation. */
export async function consumeIncidentOpened(deps: RemoteSourceDeps, bus: EventBus, poke: () => void): Promise<void> {
  const investigating = investigatingOrganizations(deps);
  // A storm's opens are recorded a group at a time: one statement per group, not per incident.
  const record = groupCalls<{ orgId: string; incidentId: string }>(async (all) => {
    const opened = await investigating.keep(all);
    if (opened.length === 0) return;
    // Only organizations with reads configured get an investigation; a redelivery adds nothing.
    const inserted = await deps.sql`
      insert into remotesource.investigations (org_id, incident_id, run, requested_by)
      select o.org_id, o.incident_id, 1, 'incident.opened'
      from unnest(${opened.map((o) => o.orgId)}::uuid[], ${opened.map((o) => o.incidentId)}::uuid[]) as o(org_id, incident_id)
      where exists (select 1 from remotesource.connections c where c.org_id = o.org_id and c.investigation_reads <> '[]'::jsonb)
      on conflict do nothing`;
    if (inserted.count > 0) poke();
  }, RECORD_GROUP);
  await onEvent(bus, EVENTS.incidentOpened, (event) => record({ orgId: event.orgId, incidentId: event.incidentId }), {
    durableName: "remotesource-investigation",
    concurrency: RECORD_GROUP,
  });
}

/** A counting semaphore per organization. */
function organizationLimits(limit: number) {
  const slots = new Map<string, { active: number; waiting: (() => void)[] }>();
  return async function withSlot<T>(orgId: string, work: () => Promise<T>): Promise<T> {
    let slot = slots.get(orgId);
    if (!slot) {
      slot = { active: 0, waiting: [] };
      slots.set(orgId, slot);
    }
    const held = slot;
    if (held.active >= limit) await new Promise<void>((resolve) => held.waiting.push(resolve));
    else held.active += 1;
    try {
      return await work();
    } finally {
      const next = held.waiting.shift();
      if (next) next();
      else {
        held.active -= 1;
        if (held.active === 0) slots.delete(orgId);
      }
    }
  };
}

/** The raw text kept: at most `limit` bytes of UTF-8, cut on a character boundary. */
export function cutRaw(raw: string, limit: number): { raw: string; cut: boolean } {
  const bytes = Buffer.from(raw, "utf8");
  if (bytes.length <= limit) return { raw, cut: false };
  let end = limit;
  // Back up over continuation bytes so that no character is split.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end -= 1;
  return { raw: bytes.subarray(0, end).toString("utf8"), cut: true };
}

/** What a read's expressions see of the incident. */
export function incidentVariables(incident: Incident): Record<string, unknown> {
  const opened = incident.timeline.find((e) => e.kind === "opened");
  const data = (opened?.data ?? {}) as JsonObject;
  const labels: Record<string, string> = {};
  for (const source of [data.groupLabels, data.commonLabels, data.labels]) {
    if (source && typeof source === "object" && !Array.isArray(source)) {
      for (const [key, value] of Object.entries(source)) if (typeof value === "string") labels[key] = value;
    }
  }
  return {
    id: incident.id,
    title: incident.title,
    severity: incident.severity,
    source: incident.source,
    entity: { kind: incident.entity?.kind ?? "", id: incident.entity?.id ?? "" },
    labels,
    openedAt: incident.openedAt ? timestampDate(incident.openedAt).toISOString() : "",
    runbookUrl: incident.runbookUrl ?? "",
  };
}

interface PlannedRead {
  key: string;
  position: number;
  connection: ConnectionRow;
  read: StoredRead;
}

/** The investigation worker: claims due investigations and runs them. */
export function createInvestigator(deps: RemoteSourceDeps, options: InvestigatorOptions = {}): Investigator {
  const totalBudgetMs = options.totalBudgetMs ?? INVESTIGATION_LIMITS.totalBudgetMs;
  const readBudgetMs = options.readBudgetMs ?? READ_BUDGET_MS;
  const pollMs = options.pollMs ?? 1000;
  const withSlot = organizationLimits(options.readsPerOrganization ?? INVESTIGATION_LIMITS.readsPerOrganization);
  // A claim outlives the investigation's budget: only a stopped process leaves one to lapse.
  const leaseSeconds = Math.ceil(totalBudgetMs / 1000) + 60;
  const running = new Set<Promise<void>>();
  const capabilitiesKept = new Map<string, { until: number; capabilities: Promise<CapabilitiesResponse | undefined> }>();
  const sourceClients = new Map<string, SourceClient>();
  const compiledReads = new Map<string, CompiledRead>();
  let timer: NodeJS.Timeout | undefined;
  let runsAtOnce: number = INVESTIGATION_LIMITS.investigationsPerProcess;
  let stopped = true;
  let looking = false;
  let again = false;

  /**
   * One source client per connection revision, kept for the runs after: its credential is opened
   * once and its connections to the source are reused. A changed connection gets a new one.
   */
  function sourceClientFor(connection: ConnectionRow): SourceClient {
    const key = `${connection.id}:${connection.revision}`;
    let client = sourceClients.get(key);
    if (!client) {
      client = clientFor(deps, connection, { keepAliveMs: SOURCE_KEEP_ALIVE_MS });
      // An older revision's client is left to its idle timeout (a run may still be reading
      // through it) and to this bound.
      if (sourceClients.size >= CONNECTIONS_KEPT) {
        const [oldestKey, oldest] = sourceClients.entries().next().value as [string, SourceClient];
        oldest.close();
        sourceClients.delete(oldestKey);
      }
      sourceClients.set(key, client);
    }
    return client;
  }

  /**
   * The source's capabilities, read at most once a minute per connection revision; a failed read
   * is kept for CAPABILITIES_FAILURE_KEPT_MS, so a failing source is not asked once per incident.
   */
  function capabilitiesFor(connection: ConnectionRow): Promise<CapabilitiesResponse | undefined> {
    const key = `${connection.id}:${connection.revision}`;
    const now = Date.now();
    const kept = capabilitiesKept.get(key);
    if (kept && kept.until > now) return kept.capabilities;
    for (const [other, entry] of capabilitiesKept) if (entry.until <= now) capabilitiesKept.delete(other);
    if (capabilitiesKept.size >= CONNECTIONS_KEPT) capabilitiesKept.delete(capabilitiesKept.keys().next().value!);
    const entry = { until: now + CAPABILITIES_KEPT_MS, capabilities: Promise.resolve<CapabilitiesResponse | undefined>(undefined) };
    entry.capabilities = Promise.resolve()
      .then(() => capabilitiesOf(deps, connection, sourceClientFor(connection)))
      .catch(() => {
        entry.until = Date.now() + CAPABILITIES_FAILURE_KEPT_MS;
        return undefined;
      });
    capabilitiesKept.set(key, entry);
    return entry.capabilities;
  }

  /** A read's expressions compiled once per process, not once per incident; throws as compileRead does. */
  function compiledRead(read: StoredRead): CompiledRead {
    const key = JSON.stringify([read.name, read.template, read.when]);
    let compiled = compiledReads.get(key);
    if (!compiled) {
      compiled = compileRead(read, read.name);
      if (compiledReads.size >= COMPILED_READS_KEPT) compiledReads.clear();
      compiledReads.set(key, compiled);
    }
    return compiled;
  }

  async function claim(count: number): Promise<InvestigationRow[]> {
    return deps.sql<InvestigationRow[]>`
      update remotesource.investigations i
      set state = 'running', attempts = i.attempts + 1, claimed_until = now() + make_interval(secs => ${leaseSeconds})
      from (
        select org_id, incident_id, run from remotesource.investigations
        where state = 'pending' or (state = 'running' and claimed_until < now())
        order by created_at limit ${count} for update skip locked
      ) due
      where i.org_id = due.org_id and i.incident_id = due.incident_id and i.run = due.run
      returning i.*`;
  }

  async function look(): Promise<void> {
    if (stopped) return;
    if (looking) {
      again = true;
      return;
    }
    looking = true;
    try {
      do {
        again = false;
        const free = runsAtOnce - running.size;
        if (free <= 0) break;
        const claimed = await claim(free);
        for (const investigation of claimed) {
          // Past its attempts only when the processes running it stopped each time: not once more.
          const work: Promise<void> = (
            investigation.attempts > RUN_RETRY.attempts
              ? giveUp(investigation, investigation.attempts - 1, investigation.reason ?? "the process running it stopped")
              : runInvestigation(investigation)
          )
            .catch((err) => retryLater(investigation, err))
            .finally(() => {
              running.delete(work);
              void look();
            });
          running.add(work);
        }
      } while (again && !stopped);
    } catch (err) {
      deps.logger.warn({ err }, "claiming investigations failed; looking again soon");
    } finally {
      looking = false;
    }
  }

  /**
   * A run that failed on the way (the incident core or the bus unreachable, evidence that cannot
   * be stored): its claim is shortened so that it runs again after a growing wait, saying why in
   * its reason; after RUN_RETRY.attempts it stops as `failed`. What it recorded stays, and is not
   * read twice.
   */
  async function retryLater(investigation: InvestigationRow, err: unknown): Promise<void> {
    const { attempts } = investigation;
    const why = storableText(err instanceof Error ? err.message : String(err)).slice(0, REASON_MAX);
    if (attempts >= RUN_RETRY.attempts) {
      deps.logger.warn({ err, incidentId: investigation.incident_id, run: investigation.run, attempts }, "investigation failed; no attempt is left");
      return giveUp(investigation, attempts, why).catch((error) =>
        deps.logger.warn({ err: error }, "could not record a failed investigation; it is given up when its claim lapses"),
      );
    }
    const wait = retryWaitSeconds(attempts);
    deps.logger.warn({ err, incidentId: investigation.incident_id, run: investigation.run, attempts }, "investigation interrupted; it runs again shortly");
    await deps.sql`
      update remotesource.investigations
      set claimed_until = now() + make_interval(secs => ${wait}),
          reason = ${`attempt ${attempts} of ${RUN_RETRY.attempts} failed (${why}); trying again in ${wait} s`}
      where org_id = ${investigation.org_id} and incident_id = ${investigation.incident_id} and run = ${investigation.run} and state = 'running'`.catch(
      (error) => deps.logger.warn({ err: error }, "could not shorten an interrupted investigation's claim; it runs again when the claim lapses"),
    );
  }

  /** Stops a run that has used its attempts: `failed`, the reason saying why; a member may run it again. */
  async function giveUp(investigation: InvestigationRow, attempts: number, why: string): Promise<void> {
    await deps.sql`
      update remotesource.investigations
      set state = 'failed', reason = ${`gave up after ${attempts} attempts: ${why}`}, completed_at = now()
      where org_id = ${investigation.org_id} and incident_id = ${investigation.incident_id} and run = ${investigation.run} and state = 'running'`;
  }

  async function skip(investigation: InvestigationRow, reason: string): Promise<void> {
    await deps.sql`
      update remotesource.investigations set state = 'skipped', reason = ${reason}, completed_at = now()
      where org_id = ${investigation.org_id} and incident_id = ${investigation.incident_id} and run = ${investigation.run} and state = 'running'`;
  }

  async function runInvestigation(investigation: InvestigationRow): Promise<void> {
    const started = Date.now();
    const deadline = started + totalBudgetMs;
    const { org_id: orgId, incident_id: incidentId, run } = investigation;
    const answer = await deps.clients.incidents.incidentState({ orgId, incidentId, withIncident: true });
    if (!answer.state || !answer.incident) return skip(investigation, "no such incident");
    if (answer.state !== "open") return skip(investigation, `the incident was ${answer.state} before its investigation started`);
    const incident = answer.incident;
    const runbookUrl = incident.runbookUrl ?? null;
    if (runbookUrl !== null) {
      await deps.sql`
        update remotesource.investigations set runbook_url = ${runbookUrl}
        where org_id = ${orgId} and incident_id = ${incidentId} and run = ${run}`;
    }

    const connections = await deps.sql<ConnectionRow[]>`
      select * from remotesource.connections where org_id = ${orgId} and investigation_reads <> '[]'::jsonb order by created_at, id`;
    const planned: PlannedRead[] = [];
    for (const connection of connections) {
      for (const read of storedReads(connection)) {
        planned.push({ key: `${connection.id}:${read.name}`, position: planned.length, connection, read });
      }
    }
    const done = new Set(
      (
        await deps.sql<{ read_key: string }[]>`
          select read_key from remotesource.evidence where org_id = ${orgId} and incident_id = ${incidentId} and run = ${run}`
      ).map((r) => r.read_key),
    );
    const bindings = { incident: toCelInput(incidentVariables(incident)) };
    const openedMs = incident.openedAt ? timestampDate(incident.openedAt).getTime() : started;

    const outcomes = await Promise.all(
      planned.map(async (p) => {
        if (done.has(p.key)) return undefined;
        let compiled: CompiledRead;
        try {
          compiled = compiledRead(p.read);
        } catch (err) {
          // Checked when saved; a read that no longer compiles is recorded, never retried forever.
          const operation = p.read.call === "invoke" ? p.read.operation : p.read.call;
          return record(p, investigation, partialResult(operation, {}, `template failed: ${err instanceof Error ? err.message : String(err)}`), undefined);
        }
        if (compiled.when) {
          const verdict = evaluateMetered(TEMPLATE_ENVIRONMENT, compiled.when, bindings);
          if ("value" in verdict && verdict.value === false) return undefined;
          if ("error" in verdict || verdict.value !== true) {
            const reason = "error" in verdict ? verdict.error : "it did not yield a bool";
            return record(p, investigation, partialResult(p.read.call, {}, `condition failed: ${reason}`), undefined);
          }
        }
        const result = await withSlot(orgId, () => readOne(p, compiled.template, bindings, openedMs, deadline));
        return record(p, investigation, result.result, result.window);
      }),
    );
    const recorded = outcomes.filter((o): o is { name: string; partial: boolean; error: string | null } => o !== undefined);
    await finish(investigation, incident, runbookUrl, recorded);
  }

  async function readOne(
    p: PlannedRead,
    template: CompiledRead["template"],
    bindings: Record<string, unknown>,
    openedMs: number,
    deadline: number,
  ): Promise<{ result: RawResult; window?: { fromMs: number; toMs: number } }> {
    const { read } = p;
    const now = Date.now();
    const window = { fromMs: Math.floor(openedMs - read.lookbackMinutes * 60_000), toMs: now };
    const operation = read.call === "invoke" ? read.operation : read.call;
    const left = deadline - now;
    if (left <= 0) return { result: partialResult(operation, {}, `not read: the investigation's total budget of ${totalBudgetMs} ms was spent`), window };
    let value: unknown;
    if (template) {
      const evaluated = evaluateMetered(TEMPLATE_ENVIRONMENT, template, bindings);
      if ("error" in evaluated) return { result: partialResult(operation, {}, `template failed: ${evaluated.error}`), window };
      value = fromCelValue(evaluated.value);
    }
    const capabilities = await capabilitiesFor(p.connection);
    let request: JsonObject;
    if (read.call === "invoke") {
      if (value !== undefined && (value === null || typeof value !== "object" || Array.isArray(value))) {
        return { result: partialResult(operation, {}, "template failed: it must yield a map of params"), window };
      }
      const params = { ...((value as JsonObject | undefined) ?? {}) };
      const descriptor = capabilities?.operations.find((o) => o.operation === read.operation);
      if (capabilities && !descriptor) {
        return { result: partialResult(operation, params, `unknown operation: the source no longer advertises ${read.operation}`), window };
      }
      const spec = descriptor?.window;
      if (spec) {
        params[spec.start] = formatWindowValue(window.fromMs, spec.format);
        params[spec.end] = formatWindowValue(window.toMs, spec.format);
        if (spec.step) {
          const seconds = Math.max(
            read.step ? (stepSeconds(read.step) ?? READ_LIMITS.defaultStepSeconds) : READ_LIMITS.defaultStepSeconds,
            spec.minStepSeconds ?? 0,
          );
          params[spec.step] = spec.stepFormat === "seconds" ? seconds : `${seconds}s`;
        }
      }
      request = { operation: read.operation, params: params as JsonValue };
    } else {
      if (typeof value !== "string" || !value.trim())
        return { result: partialResult(operation, {}, "template failed: it must yield a non-empty string"), window };
      const bounds = { fromMs: window.fromMs, toMs: window.toMs };
      if (read.call === "metrics/range") {
        const min = capabilities ? (rangeDescriptor(capabilities, "metrics")?.window?.minStepSeconds ?? 0) : 0;
        const seconds = Math.max(read.step ? (stepSeconds(read.step) ?? READ_LIMITS.defaultStepSeconds) : READ_LIMITS.defaultStepSeconds, min);
        request = { expr: value, window: bounds, step: `${seconds}s` };
      } else {
        request = { query: value, window: bounds, limit: read.limit ?? READ_LIMITS.defaultLogLimit };
      }
    }
    try {
      const outcome = await sourceClientFor(p.connection).read(read.call, request, { budgetMs: Math.min(readBudgetMs, left) });
      if (outcome.failure?.kind === "credentials-rejected") {
        // Shown as failed until the credential is updated (or a test passes again).
        await recordStatus(deps, p.connection, "failed", CREDENTIALS_REJECTED, { tested: false });
      }
      if (outcome.failure?.kind === "not-found" && read.call === "invoke") {
        outcome.result.error = `unknown operation: ${outcome.result.error ?? read.operation}`;
      }
      return { result: outcome.result, window };
    } catch (err) {
      if (err instanceof ReadRequestError) return { result: partialResult(operation, {}, `the read could not be sent: ${err.message}`), window };
      const message = err instanceof Error ? err.message : String(err);
      return { result: partialResult(operation, {}, `the read could not be made: ${message}`), window };
    }
  }

  async function record(
    p: PlannedRead,
    investigation: InvestigationRow,
    result: RawResult,
    window: { fromMs: number; toMs: number } | undefined,
  ): Promise<{ name: string; partial: boolean; error: string | null }> {
    // Postgres text and jsonb cannot hold NUL: a source's stray one is replaced, as intake does,
    // rather than failing the insert on every attempt.
    const kept = cutRaw(storableText(result.raw), INVESTIGATION_LIMITS.rawKeptBytes);
    const series = result.series.map((s) => storableJson(toProtocolJson(RawSeriesSchema, s)));
    const entries = result.entries.map((e) => storableJson(toProtocolJson(LogEntrySchema, e)));
    const error = result.partial ? storableText(result.error ?? "partial result") : null;
    const operation = storableText(result.operation || (p.read.call === "invoke" ? p.read.operation : p.read.call));
    const params = storableJson((result.params ?? {}) as JsonObject);
    await deps.sql.begin(async (tx) => {
      const inserted = await tx`
        insert into remotesource.evidence (org_id, incident_id, run, read_key, position, connection_id, connection_name, read_name, call, operation,
          params, fetched_at, partial, error, series, entries, raw, raw_cut, from_ms, to_ms)
        values (${investigation.org_id}, ${investigation.incident_id}, ${investigation.run}, ${p.key}, ${p.position}, ${p.connection.id},
          ${p.connection.name}, ${p.read.name}, ${p.read.call}, ${operation},
          ${tx.json(params)}, ${storableText(result.fetchedAt || new Date().toISOString())}, ${result.partial}, ${error},
          ${tx.json(series as JsonObject[])}, ${tx.json(entries as JsonObject[])}, ${kept.raw}, ${kept.cut},
          ${window?.fromMs ?? null}, ${window?.toMs ?? null})
        on conflict do nothing`;
      if (inserted.count > 0) {
        await deps.outbox.write(
          tx,
          EVENTS.evidenceRecorded,
          create(EvidenceRecordedSchema, {
            orgId: investigation.org_id,
            incidentId: investigation.incident_id,
            run: investigation.run,
            readName: p.read.name,
            at: timestampNow(),
          }),
        );
      }
    });
    deps.outbox.poke();
    return { name: `${p.connection.name} / ${p.read.name}`, partial: result.partial, error };
  }

  async function finish(
    investigation: InvestigationRow,
    incident: Incident,
    runbookUrl: string | null,
    recorded: { name: string; partial: boolean; error: string | null }[],
  ): Promise<void> {
    const { org_id: orgId, incident_id: incidentId, run } = investigation;
    // Every read of the run, including those recorded before a restart.
    const rows = await deps.sql<{ connection_name: string; read_name: string; partial: boolean; error: string | null }[]>`
      select connection_name, read_name, partial, error from remotesource.evidence
      where org_id = ${orgId} and incident_id = ${incidentId} and run = ${run} order by position`;
    const partial = rows.filter((r) => r.partial);
    const lines = [
      ...(runbookUrl ? [`Runbook: ${runbookUrl}`] : []),
      rows.length === 0
        ? "Investigation: no configured read applies to this incident."
        : `Investigation read ${rows.length} ${rows.length === 1 ? "source" : "sources"}: ${rows.length - partial.length} complete, ${partial.length} partial.`,
      ...partial.map((r) => `${r.connection_name} / ${r.read_name}: ${r.error ?? "partial result"}`),
    ];
    const org = await deps.clients.identity.getOrganization({ id: orgId });
    const link = `${incident.workspaceUrl.replace(/\/o\/\/incidents\//, `/o/${encodeURIComponent(org.slug)}/incidents/`)}#evidence`;
    await deps.clients.incidents.appendTimeline({
      orgId,
      incidentId,
      entry: {
        kind: "investigation",
        summary: lines.join("\n"),
        link,
        eventId: `investigation:${run}`,
        data: {
          run,
          ...(runbookUrl ? { runbookUrl } : {}),
          reads: rows.map((r) => ({ connection: r.connection_name, read: r.read_name, partial: r.partial, ...(r.error ? { error: r.error } : {}) })),
        },
      },
    });
    await deps.sql.begin(async (tx) => {
      const [completed] = await tx`
        update remotesource.investigations set state = 'done', reason = null, completed_at = now()
        where org_id = ${orgId} and incident_id = ${incidentId} and run = ${run} and state = 'running'
        returning run`;
      if (completed) {
        await deps.outbox.write(
          tx,
          EVENTS.investigationCompleted,
          create(InvestigationCompletedSchema, { orgId, incidentId, run, reads: rows.length, partialReads: partial.length, at: timestampNow() }),
        );
      }
    });
    deps.outbox.poke();
    deps.logger.info({ incidentId, run, reads: rows.length, partial: partial.length, recordedNow: recorded.length }, "investigation completed");
  }

  return {
    start() {
      stopped = false;
      timer = setInterval(() => {
        // A loop kept busy by a storm of deliveries gets one investigation at a time: each costs
        // the process several statements, calls and a read, all on the loop the deliveries share.
        runsAtOnce = backgroundShouldYield() ? INVESTIGATION_LIMITS.investigationsWhenBusy : INVESTIGATION_LIMITS.investigationsPerProcess;
        void look();
      }, pollMs);
      timer.unref();
      void look();
    },
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      // A read may wait on a slow source for its whole budget: shutdown waits a moment, no more.
      // A run left behind keeps its claim and is taken up again when the claim lapses.
      let wait: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...running]), new Promise<void>((resolve) => (wait = setTimeout(resolve, STOP_WAIT_MS)))]);
      clearTimeout(wait);
      for (const client of sourceClients.values()) client.close();
      sourceClients.clear();
    },
    poke() {
      void look();
    },
  };
}

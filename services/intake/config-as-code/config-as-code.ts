import { randomUUID } from "node:crypto";
import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { z } from "zod";
import {
  type ApplyConfigResponse,
  ApplyConfigResponseSchema,
  type ConfigChange,
  ConfigChangeSchema,
  CustomSourceCredentialSchema,
  CustomSourceRuleSchema,
  CustomSourceSignatureSchema,
  ExportConfigResponseSchema,
} from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import type { Principal } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { checkEscalationPolicy, type EscalationSteps } from "../../domain/escalation-rules.js";
import { isSourceBadge, SEVERITIES } from "../../domain/vocabulary.js";
import { ADMINS, authorize } from "../../runtime/credentials/auth.js";
import type { Clients } from "../../runtime/transport/clients.js";
import { FailedPreconditionError, InvalidArgumentError, UnavailableError } from "../../runtime/errors.js";
import type { AuditRecord } from "../../runtime/transport/events.js";
import { newHexSecret, sha256 } from "../../runtime/credentials/secrets.js";
import { compileRules } from "../../cel/cel-mapping.js";
import {
  checkHeartbeatEntry,
  checkWindowEntry,
  type HeartbeatSpec,
  heartbeatEntry,
  heartbeatEntrySchema,
  heartbeatSpecOf,
  maintenanceWindowEntrySchema,
  sameHeartbeat,
  scheduleCalls,
  type WindowSpec,
  windowEntry,
  windowKey,
  windowName,
  windowSpecOf,
} from "./config-schedules.js";
import { type Broadcast, CORRELATION_CHANGED, CUSTOM_SOURCE_CHANGED, GROUPING_OVERRIDES_CHANGED } from "../../runtime/transport/broadcast.js";
import type { SecretBox } from "../../runtime/credentials/secret-box.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import {
  authOfRow,
  rulesFromJson,
  rulesToJson,
  sealSourceSecret,
  triggerUrl,
  validateDescription,
  validateName,
} from "../custom-sources/custom-source-records.js";
import { authEntry, sameAuth, type SourceAuth, sourceAuthFrom } from "../custom-sources/source-auth.js";
import { type CustomSourceRow, SOURCES_PER_ORG } from "../custom-sources/store.js";
import { type CorrelationSettings, checkCorrelationSettings } from "../correlation/correlation.js";
import type { ConfigState, ConfigStore, ConfigWrite } from "./store.js";

/** What configuration as code needs beyond intake's clients; without it its routes answer Unavailable. */
export interface ConfigDeps {
  store: ConfigStore;
  /** The relay to poke after the plan's audit records. */
  outbox: Pick<Outbox, "poke">;
  publicUrl: string;
  /** Tells every replica a source changed. */
  broadcast: Broadcast;
  /** Seals the secrets of created sources that check signatures. */
  secretBox?: (() => SecretBox) | undefined;
}

const RULE_FIELDS = ["name", "when", "kind", "title", "severity", "attachKey", "eventId", "entity", "summary", "link", "runbookUrl", "ignoreReason"] as const;

const ruleSchema = z.object(Object.fromEntries(RULE_FIELDS.map((field) => [field, z.string().optional()]))).strict();
const fileSchema = z
  .object({
    version: z.literal(1),
    customSources: z
      .array(
        z
          .object({
            name: z.string(),
            preset: z.string().optional(),
            description: z.string().optional(),
            auth: z
              .object({
                secretInPath: z.boolean().optional(),
                basicAuth: z.boolean().optional(),
                secretHeader: z.string().optional(),
                signature: z
                  .object({
                    header: z.string(),
                    algorithm: z.string().optional(),
                    prefix: z.string().optional(),
                    encoding: z.string().optional(),
                    timestampHeader: z.string().optional(),
                    toleranceSeconds: z.number().int().min(0).optional(),
                    signedContent: z.string().optional(),
                    idHeader: z.string().optional(),
                  })
                  .strict()
                  .optional(),
              })
              .strict()
              .optional(),
            rules: z.array(ruleSchema),
          })
          .strict(),
      )
      .optional(),
    groupingOverrides: z
      .array(z.object({ source: z.string(), attachKey: z.string().optional(), windowHours: z.number().int().min(0).optional() }).strict())
      .optional(),
    // `mode: off` turns correlation off; no section leaves it as it is.
    correlation: z
      .object({ mode: z.enum(["link", "attach", "off"]), windowMinutes: z.number().int().min(1).optional(), key: z.string().optional() })
      .strict()
      .optional(),
    heartbeats: z.array(heartbeatEntrySchema).optional(),
    maintenanceWindows: z.array(maintenanceWindowEntrySchema).optional(),
    // Acknowledgement deadlines: minutes after opening per severity (GET/PUT /o/{org}/escalation).
    escalation: z
      .object(Object.fromEntries(SEVERITIES.map((sev) => [sev, z.array(z.number()).optional()])))
      .strict()
      .optional(),
  })
  .strict();

/** The escalation section as the file writes it: `{sev1: [5, 15, 30], ...}`, severities with steps only. */
function escalationEntry(severities: readonly EscalationSteps[]): JsonObject {
  return Object.fromEntries(severities.filter((s) => s.minutes.length > 0).map((s) => [s.severity, [...s.minutes]]));
}

type ConfigFile = z.infer<typeof fileSchema>;

interface SourceSpec {
  name: string;
  preset: string;
  /** None: empty, as the file leaves the key out. */
  description: string;
  auth: SourceAuth;
  rules: Record<string, string>[];
}

/** A rule with its empty fields left out, in a fixed field order: how it is written and compared. */
function normalRule(rule: Record<string, string | undefined>): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const field of RULE_FIELDS) {
    const value = rule[field]?.trim();
    if (value) kept[field] = value;
  }
  return kept;
}

function specOf(row: CustomSourceRow): SourceSpec {
  return {
    name: row.name,
    preset: row.preset,
    description: row.description,
    auth: authOfRow(row),
    rules: row.rules.map((rule) => normalRule(rule)),
  };
}

/** The settings as the file writes them (the key only when set): how they are written and compared. */
function correlationEntry(settings: CorrelationSettings): JsonObject {
  return { mode: settings.mode, windowMinutes: settings.windowMinutes, ...(settings.key ? { key: settings.key } : {}) };
}

function sameSpec(a: SourceSpec, b: SourceSpec): boolean {
  return a.preset === b.preset && a.description === b.description && sameAuth(a.auth, b.auth) && JSON.stringify(a.rules) === JSON.stringify(b.rules);
}

/** A grouping override as a file sets it. */
interface OverrideSpec {
  attachKey: string;
  windowHours: number;
}

/** Everything a file asks for, checked: what a plan compares with the organization. */
interface WantedConfig {
  sources: Map<string, SourceSpec>;
  overrides: Map<string, OverrideSpec>;
  /** None: the file turns correlation off, or has no correlation section. */
  correlation: CorrelationSettings | undefined;
  heartbeats: Map<string, HeartbeatSpec>;
  windows: Map<string, WindowSpec>;
  escalation: EscalationSteps[] | undefined;
}

function parseConfigFile(yaml: string): ConfigFile {
  try {
    return fileSchema.parse(parseYaml(yaml));
  } catch (err) {
    const message = err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") : (err as Error).message;
    throw new InvalidArgumentError(`yaml: ${message.slice(0, 500)}`);
  }
}

/** The file's custom sources by name: each named once, its rules compiling, its auth options consistent. */
function checkSources(entries: NonNullable<ConfigFile["customSources"]>): Map<string, SourceSpec> {
  const wanted = new Map<string, SourceSpec>();
  for (const [index, source] of entries.entries()) {
    const name = validateName(source.name);
    if (wanted.has(name)) throw new InvalidArgumentError(`customSources[${index}].name: ${JSON.stringify(name)} appears twice`);
    const rules = source.rules.map((rule) => normalRule(rule));
    try {
      compileRules(rules.map((rule) => fromJson(CustomSourceRuleSchema, rule)));
    } catch (err) {
      throw new InvalidArgumentError(`customSources[${index}] (${name}): ${(err as Error).message}`);
    }
    let description: string;
    let auth: SourceAuth;
    try {
      description = validateDescription(source.description ?? "");
      auth = sourceAuthFrom({
        secretInPath: source.auth?.secretInPath ?? false,
        basicAuth: source.auth?.basicAuth ?? false,
        secretHeader: source.auth?.secretHeader ?? "",
        ...(source.auth?.signature ? { signature: create(CustomSourceSignatureSchema, source.auth.signature) } : {}),
      });
    } catch (err) {
      throw new InvalidArgumentError(`customSources[${index}] (${name}): ${(err as Error).message}`);
    }
    wanted.set(name, { name, preset: source.preset ?? "", description, auth, rules });
  }
  if (wanted.size > SOURCES_PER_ORG) throw new FailedPreconditionError(`an organization has at most ${SOURCES_PER_ORG} custom sources`);
  return wanted;
}

/** The file's grouping overrides by source: a known source each, an attach key that compiles. */
function checkOverrides(entries: NonNullable<ConfigFile["groupingOverrides"]>): Map<string, OverrideSpec> {
  const wanted = new Map<string, OverrideSpec>();
  for (const [index, override] of entries.entries()) {
    if (!isSourceBadge(override.source)) throw new InvalidArgumentError(`groupingOverrides[${index}].source: not a source`);
    const attachKey = override.attachKey?.trim() ?? "";
    if (attachKey) {
      try {
        compileRules([create(CustomSourceRuleSchema, { title: "'x'", attachKey })]);
      } catch (err) {
        throw new InvalidArgumentError(`groupingOverrides[${index}].attachKey: ${(err as Error).message.replace(/^rules\[0\]\.attachKey: /, "")}`);
      }
    }
    wanted.set(override.source, { attachKey, windowHours: override.windowHours ?? 0 });
  }
  return wanted;
}

/** Everything in a file, checked before anything changes; the first problem found refuses it. */
function checkConfigFile(file: ConfigFile): WantedConfig {
  const sources = checkSources(file.customSources ?? []);
  const overrides = checkOverrides(file.groupingOverrides ?? []);
  const correlation =
    file.correlation && file.correlation.mode !== "off"
      ? checkCorrelationSettings({ ...file.correlation, mode: file.correlation.mode }, "correlation.")
      : undefined;
  const heartbeats = new Map<string, HeartbeatSpec>();
  for (const [index, entry] of (file.heartbeats ?? []).entries()) {
    const spec = checkHeartbeatEntry(entry, index);
    if (heartbeats.has(spec.name)) throw new InvalidArgumentError(`heartbeats[${index}].name: ${JSON.stringify(spec.name)} appears twice`);
    heartbeats.set(spec.name, spec);
  }
  // A window of the file that has already ended is left out: there is nothing to create.
  const windows = new Map<string, WindowSpec>();
  for (const [index, entry] of (file.maintenanceWindows ?? []).entries()) {
    const w = checkWindowEntry(entry, index);
    if (w.endsAt.getTime() > Date.now()) windows.set(windowKey(w), w);
  }
  let escalation: EscalationSteps[] | undefined;
  if (file.escalation) {
    try {
      escalation = checkEscalationPolicy(Object.entries(file.escalation).map(([severity, minutes]) => ({ severity, minutes: minutes ?? [] })));
    } catch (err) {
      throw new InvalidArgumentError(`escalation: ${(err as Error).message}`);
    }
  }
  return { sources, overrides, correlation, heartbeats, windows, escalation };
}

const configChange = (action: string, kind: string, name: string): ConfigChange => create(ConfigChangeSchema, { action, kind, name });

/** The changes to intake's own part (custom sources, grouping overrides, correlation); a section the file leaves out is left as it is. */
function planIntake(file: ConfigFile, wanted: WantedConfig, state: ConfigState): ConfigChange[] {
  const { sources, overrides, correlation } = state;
  const changes: ConfigChange[] = [];
  if (file.customSources) {
    const existing = new Map(sources.map((row) => [row.name, row]));
    for (const [name, spec] of wanted.sources) {
      const row = existing.get(name);
      if (!row) changes.push(configChange("create", "customSource", name));
      else if (!sameSpec(specOf(row), spec)) changes.push(configChange("update", "customSource", name));
    }
    for (const row of sources) if (!wanted.sources.has(row.name)) changes.push(configChange("delete", "customSource", row.name));
  }
  if (file.groupingOverrides) {
    const existing = new Map(overrides.map((o) => [o.source, o]));
    for (const [source, o] of wanted.overrides) {
      const held = existing.get(source);
      if (!held) changes.push(configChange("create", "groupingOverride", source));
      else if (held.attach_key !== o.attachKey || held.window_hours !== o.windowHours) changes.push(configChange("update", "groupingOverride", source));
    }
    for (const o of overrides) if (!wanted.overrides.has(o.source)) changes.push(configChange("delete", "groupingOverride", o.source));
  }
  if (file.correlation) {
    const held = correlation ? JSON.stringify(correlationEntry(correlation)) : undefined;
    const asked = wanted.correlation ? JSON.stringify(correlationEntry(wanted.correlation)) : undefined;
    if (held !== asked) changes.push(configChange(!asked ? "delete" : held ? "update" : "create", "correlation", "correlation"));
  }
  return changes;
}

type ScheduleCalls = ReturnType<typeof scheduleCalls>;
type HeartbeatChange = { action: string; spec?: HeartbeatSpec; name: string };
type WindowChange = { action: string; spec: WindowSpec; id?: string };

async function planHeartbeats(calls: ScheduleCalls, wanted: Map<string, HeartbeatSpec>): Promise<HeartbeatChange[]> {
  const changes: HeartbeatChange[] = [];
  const held = new Map((await calls.heartbeats()).map((h) => [h.name, heartbeatSpecOf(h)]));
  for (const [name, spec] of wanted) {
    const now = held.get(name);
    if (!now) changes.push({ action: "create", spec, name });
    else if (!sameHeartbeat(now, spec)) changes.push({ action: "update", spec, name });
  }
  for (const name of held.keys()) if (!wanted.has(name)) changes.push({ action: "delete", name });
  return changes;
}

async function planWindows(calls: ScheduleCalls, wanted: Map<string, WindowSpec>): Promise<WindowChange[]> {
  const changes: WindowChange[] = [];
  // Windows that have ended are history: a file never deletes them.
  const held = (await calls.windows()).map((w) => ({ id: w.id, spec: windowSpecOf(w) })).filter((w) => w.spec.endsAt.getTime() > Date.now());
  const heldKeys = new Set(held.map((w) => windowKey(w.spec)));
  for (const [key, spec] of wanted) if (!heldKeys.has(key)) changes.push({ action: "create", spec });
  held.sort((a, b) => a.spec.startsAt.getTime() - b.spec.startsAt.getTime());
  for (const w of held) if (!wanted.has(windowKey(w.spec))) changes.push({ action: "delete", spec: w.spec, id: w.id });
  return changes;
}

/** A file's whole plan: every change as answered, and the heartbeats' and windows' own to run after intake's. */
interface ConfigPlan {
  changes: ConfigChange[];
  heartbeats: HeartbeatChange[];
  windows: WindowChange[];
}

async function planConfig(file: ConfigFile, wanted: WantedConfig, state: ConfigState, calls: ScheduleCalls): Promise<ConfigPlan> {
  const changes = planIntake(file, wanted, state);
  const heartbeats = file.heartbeats ? await planHeartbeats(calls, wanted.heartbeats) : [];
  for (const c of heartbeats) changes.push(configChange(c.action, "heartbeat", c.name));
  const windows = file.maintenanceWindows ? await planWindows(calls, wanted.windows) : [];
  for (const c of windows) changes.push(configChange(c.action, "maintenanceWindow", windowName(c.spec)));
  if (wanted.escalation) {
    const held = escalationEntry(await calls.escalation());
    if (JSON.stringify(held) !== JSON.stringify(escalationEntry(wanted.escalation))) changes.push(configChange("update", "escalation", "policy"));
  }
  return { changes, heartbeats, windows };
}

/**
 * The plan's writes to intake's tables, in the plan's order, with the credentials of the sources
 * it creates (answered once, in `credentials`).
 */
function intakeWrites(
  changes: ConfigChange[],
  wanted: WantedConfig,
  principal: Principal,
  config: ConfigDeps,
  credentials: ApplyConfigResponse["credentials"],
): ConfigWrite[] {
  const audit = (kind: string, data: JsonObject): AuditRecord => ({
    orgId: principal.orgId,
    kind,
    actor: principal.email,
    data: { ...data, via: "config" },
  });
  const writes: ConfigWrite[] = [];
  for (const c of changes) {
    if (c.kind === "customSource") {
      const spec = wanted.sources.get(c.name);
      const rules = spec ? rulesToJson(rulesFromJson(spec.rules)) : undefined;
      if (c.action === "create" && spec) {
        const id = randomUUID();
        const secret = newHexSecret();
        const { sealed, sealedBy } = sealSourceSecret(config.secretBox, id, secret, spec.auth.signature !== null);
        writes.push({
          kind: "createSource",
          source: {
            id,
            orgId: principal.orgId,
            orgSlug: principal.orgSlug,
            name: spec.name,
            rules: rules!,
            auth: spec.auth,
            preset: spec.preset,
            description: spec.description,
            credential: { hash: sha256(secret), sealed, sealedBy },
          },
          audit: audit("custom_source.created", { id, name: spec.name }),
        });
        const url = triggerUrl(config.publicUrl, id);
        credentials.push({
          $typeName: "warroom.intake.v1.CreatedSourceCredential",
          name: spec.name,
          credential: create(CustomSourceCredentialSchema, { secret, url, ...(spec.auth.secretInPath ? { pathUrl: `${url}/${secret}` } : {}) }),
        });
      } else if (c.action === "update" && spec) {
        writes.push({
          kind: "updateSource",
          source: { name: spec.name, rules: rules!, auth: spec.auth, preset: spec.preset, description: spec.description },
          audit: audit("custom_source.updated", { name: spec.name }),
        });
      } else if (c.action === "delete") {
        writes.push({ kind: "deleteSource", name: c.name, audit: audit("custom_source.deleted", { name: c.name }) });
      }
    } else if (c.kind === "correlation") {
      writes.push({ kind: "correlation", settings: wanted.correlation, actor: principal });
    } else if (c.kind === "groupingOverride") {
      const o = wanted.overrides.get(c.name);
      if (o) {
        writes.push({
          kind: "putOverride",
          override: { source: c.name, ...o },
          audit: audit("grouping_override.set", { source: c.name, attachKey: o.attachKey, windowHours: o.windowHours }),
        });
      } else {
        writes.push({ kind: "deleteOverride", source: c.name, audit: audit("grouping_override.deleted", { source: c.name }) });
      }
    }
  }
  return writes;
}

/**
 * Applies the heartbeats, windows and escalation of a plan, each through its own service: what
 * is added before what is removed, so a refusal midway never leaves fewer than either the old or
 * the new set.
 */
async function applySchedules(plan: ConfigPlan, wanted: WantedConfig, calls: ScheduleCalls): Promise<void> {
  const steps: { label: string; run: () => Promise<void> }[] = [];
  for (const c of plan.heartbeats) {
    if (c.action === "create") steps.push({ label: `create heartbeat ${c.name}`, run: () => calls.registerHeartbeat(c.spec!) });
    if (c.action === "update") steps.push({ label: `update heartbeat ${c.name}`, run: () => calls.updateHeartbeat(c.spec!) });
  }
  for (const c of plan.windows) {
    if (c.action === "create") steps.push({ label: `create maintenanceWindow ${windowName(c.spec)}`, run: () => calls.createWindow(c.spec) });
  }
  if (wanted.escalation && plan.changes.some((c) => c.kind === "escalation")) {
    const severities = wanted.escalation;
    steps.push({ label: "update escalation policy", run: () => calls.putEscalation(severities) });
  }
  for (const c of plan.heartbeats) {
    if (c.action === "delete") steps.push({ label: `delete heartbeat ${c.name}`, run: () => calls.deleteHeartbeat(c.name) });
  }
  for (const c of plan.windows) {
    if (c.action === "delete") steps.push({ label: `delete maintenanceWindow ${windowName(c.spec)}`, run: () => calls.deleteWindow(c.id!) });
  }
  for (const step of steps) {
    try {
      await step.run();
    } catch (err) {
      const refused = ConnectError.from(err);
      throw new ConnectError(
        `${step.label}: ${refused.rawMessage}. The changes before it were applied (custom sources, grouping overrides and correlation all at once); fix the file and apply it again to finish`,
        refused.code,
      );
    }
  }
}

/**
 * Configuration as code: an organization's custom sources, grouping overrides, correlation, heartbeats and
 * maintenance windows as one YAML file (never a secret: no credential, no ping URL), and a plan
 * that makes the organization match a file, applied idempotently.
 */
export function createConfigAsCodeHandlers(deps: {
  clients: Clients;
  config: ConfigDeps | undefined;
}): Pick<ServiceImpl<typeof IntakeService>, "exportConfig" | "applyConfig"> {
  const { clients } = deps;
  function need(): ConfigDeps {
    if (!deps.config) throw new UnavailableError("configuration as code is not available in this process");
    return deps.config;
  }

  const current = (orgId: string) => need().store.current(orgId);

  return {
    async exportConfig(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const { sources, overrides, correlation } = await current(principal.orgId);
      const calls = scheduleCalls(clients, req.org, context);
      const [heartbeats, windows, escalation] = await Promise.all([calls.heartbeats(), calls.windows(), calls.escalation()]);
      const file: JsonObject = {
        version: 1,
        customSources: sources.map((row) => {
          const spec = specOf(row);
          const entry: JsonObject = { name: spec.name };
          if (spec.preset) entry.preset = spec.preset;
          if (spec.description) entry.description = spec.description;
          const auth = authEntry(spec.auth);
          if (auth) entry.auth = auth;
          entry.rules = spec.rules;
          return entry;
        }),
        groupingOverrides: overrides.map((o) => {
          const entry: JsonObject = { source: o.source };
          if (o.attach_key) entry.attachKey = o.attach_key;
          if (o.window_hours) entry.windowHours = o.window_hours;
          return entry;
        }),
        ...(correlation ? { correlation: correlationEntry(correlation) } : {}),
        heartbeats: heartbeats.map((h) => heartbeatEntry(heartbeatSpecOf(h))),
        // A window that has ended is history, not configuration.
        maintenanceWindows: windows
          .map(windowSpecOf)
          .filter((w) => w.endsAt.getTime() > Date.now())
          .sort((a, b) => a.startsAt.getTime() - b.startsAt.getTime() || windowKey(a).localeCompare(windowKey(b)))
          .map(windowEntry),
      };
      // Written only once a policy is set, so a file without deadlines reads as before.
      if (escalation.length > 0) file.escalation = escalationEntry(escalation);
      return create(ExportConfigResponseSchema, { yaml: stringifyYaml(file, { lineWidth: 0 }) });
    },

    async applyConfig(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const file = parseConfigFile(req.yaml);
      // Everything is checked before anything changes.
      const wanted = checkConfigFile(file);
      const state = await current(principal.orgId);
      const calls = scheduleCalls(clients, req.org, context);
      const plan = await planConfig(file, wanted, state, calls);
      const response = create(ApplyConfigResponseSchema, { changes: plan.changes, applied: false });
      if (req.dryRun || plan.changes.length === 0) return response;

      const config = need();
      const writes = intakeWrites(plan.changes, wanted, principal, config, response.credentials);
      const { changedSources } = await config.store.apply(principal.orgId, writes);
      config.outbox.poke();
      // Every replica drops what it cached of a changed source, of changed overrides and of changed
      // correlation settings, before the change is answered.
      for (const id of changedSources) await config.broadcast.publish(CUSTOM_SOURCE_CHANGED, id);
      if (plan.changes.some((c) => c.kind === "groupingOverride")) await config.broadcast.publish(GROUPING_OVERRIDES_CHANGED, principal.orgId);
      if (plan.changes.some((c) => c.kind === "correlation")) await config.broadcast.publish(CORRELATION_CHANGED, principal.orgId);
      // Then the heartbeats and windows, through their own services.
      await applySchedules(plan, wanted, calls);
      response.applied = true;
      return response;
    },
  };
}

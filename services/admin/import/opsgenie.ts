import { z } from "zod";
import { MAX_INTERVAL_SECONDS } from "../../domain/heartbeat-rules.js";
import { describeIssue, ExportShapeError, type ImportPlan, type PlannedSource, slugOf, sourceNameOf } from "./import-plan.js";

/**
 * Opsgenie's heartbeats (`GET /v2/heartbeats`: `{data: {heartbeats: [...]}}`) and API
 * integrations (`GET /v2/integrations`: `{data: [...]}`, and each one's `GET
 * /v2/integrations/{id}`: `{data: {...}}`), saved into one file one answer after another or as an
 * array of answers, turned into an import plan: a heartbeat per heartbeat (a disabled one paused),
 * and a custom source per API integration taking Opsgenie's create-alert body.
 */

const UNIT_SECONDS = { minutes: 60, hours: 3600, days: 86_400 } as const;

const heartbeat = z
  .object({
    name: z.string({ error: "expected the heartbeat's name, a string" }),
    description: z.string().nullable().optional(),
    interval: z.number({ error: "expected interval, a whole number" }).int().positive(),
    intervalUnit: z.enum(["minutes", "hours", "days"], { error: "expected intervalUnit: minutes, hours or days" }),
    enabled: z.boolean({ error: "expected enabled, true or false" }),
    ownerTeam: z.object({ id: z.string().optional(), name: z.string().optional() }).passthrough().nullable().optional(),
    alertMessage: z.string().nullable().optional(),
    alertTags: z.array(z.string()).nullable().optional(),
    alertPriority: z.string().nullable().optional(),
  })
  .passthrough();

const integration = z
  .object({
    id: z.string({ error: "expected the integration's id, a string" }),
    name: z.string({ error: "expected the integration's name, a string" }),
    type: z.string({ error: "expected the integration's type, a string (API, Email, ...)" }),
    enabled: z.boolean({ error: "expected enabled, true or false" }),
    ownerTeam: z.object({ id: z.string().optional(), name: z.string().optional() }).passthrough().nullable().optional(),
    teamId: z.string().nullable().optional(),
  })
  .passthrough();

type Heartbeat = z.infer<typeof heartbeat>;
type Integration = z.infer<typeof integration>;

const heartbeatsAnswer = z.object({ data: z.object({ heartbeats: z.array(heartbeat) }).passthrough() }).passthrough();
const integrationsAnswer = z.object({ data: z.array(integration) }).passthrough();
const integrationAnswer = z.object({ data: integration }).passthrough();

const SHAPES =
  "expected the answers of GET /v2/heartbeats ({data: {heartbeats: [...]}}), GET /v2/integrations ({data: [...]}) or GET /v2/integrations/{id} ({data: {id, name, type, enabled, ...}})";

function readDocuments(documents: unknown[]): { heartbeats: Heartbeat[]; integrations: Integration[] } {
  const heartbeats: Heartbeat[] = [];
  const integrations = new Map<string, Integration>();
  const add = (doc: unknown, where: string): void => {
    if (Array.isArray(doc)) {
      for (const [i, d] of doc.entries()) add(d, `${where}[${i}]`);
      return;
    }
    const data = doc && typeof doc === "object" ? (doc as { data?: unknown }).data : undefined;
    const at = where ? `${where}.` : "";
    if (data && typeof data === "object" && !Array.isArray(data) && "heartbeats" in data) {
      const parsed = heartbeatsAnswer.safeParse(doc);
      if (!parsed.success) throw new ExportShapeError(`not Opsgenie heartbeats: ${at}${describeIssue(parsed.error.issues[0])}`);
      heartbeats.push(...parsed.data.data.heartbeats);
    } else if (Array.isArray(data)) {
      const parsed = integrationsAnswer.safeParse(doc);
      if (!parsed.success) throw new ExportShapeError(`not Opsgenie integrations: ${at}${describeIssue(parsed.error.issues[0])}`);
      // The list carries less than the detail: a detail read earlier or later wins.
      for (const i of parsed.data.data) if (!integrations.has(i.id)) integrations.set(i.id, i);
    } else if (data && typeof data === "object") {
      const parsed = integrationAnswer.safeParse(doc);
      if (!parsed.success) throw new ExportShapeError(`not an Opsgenie integration: ${at}${describeIssue(parsed.error.issues[0])}`);
      integrations.set(parsed.data.data.id, parsed.data.data);
    } else {
      throw new ExportShapeError(`not an Opsgenie answer: ${where || "the top level"} has no data (${SHAPES})`);
    }
  };
  for (const [i, d] of documents.entries()) add(d, documents.length > 1 ? `document ${i + 1}` : "");
  return { heartbeats, integrations: [...integrations.values()] };
}

/** Opsgenie's create-alert body (`POST /v2/alerts`), mapped: message, alias, priority, description. */
function alertApiRules(): PlannedSource["rules"] {
  const has = (field: string) => `'${field}' in body`;
  return [
    {
      name: "alert",
      title: "string(body.message)",
      attachKey: `${has("alias")} ? string(body.alias) : ''`,
      severity: `${has("priority")} && body.priority == 'P1' ? 'sev1' : ${has("priority")} && body.priority == 'P2' ? 'sev2' : ${has("priority")} && (body.priority == 'P4' || body.priority == 'P5') ? 'sev4' : 'sev3'`,
      summary: `${has("description")} ? string(body.description) : ''`,
    },
  ];
}

function teamOf(x: { ownerTeam?: { name?: string } | null | undefined }): string {
  return x.ownerTeam?.name ? `, team ${x.ownerTeam.name}` : "";
}

/** The import plan of the saved answers. */
export function planOpsgenieImport(documents: unknown[]): ImportPlan {
  const { heartbeats, integrations } = readDocuments(documents);
  if (heartbeats.length === 0 && integrations.length === 0) throw new ExportShapeError(`no heartbeats and no integrations in the file (${SHAPES})`);
  const plan: ImportPlan = { tool: "Opsgenie", sources: [], heartbeats: [], skipped: [] };
  const heartbeatNames = new Set<string>();
  for (const h of heartbeats) {
    const name = slugOf(h.name);
    const from = `Opsgenie heartbeat "${h.name}"`;
    if (!name) {
      plan.skipped.push({ item: from, reason: "no usable name: rename it with letters or digits" });
      continue;
    }
    if (heartbeatNames.has(name)) {
      plan.skipped.push({ item: from, reason: `the name "${name}" is taken by an earlier heartbeat in the file` });
      continue;
    }
    const seconds = h.interval * UNIT_SECONDS[h.intervalUnit];
    if (seconds > MAX_INTERVAL_SECONDS) {
      plan.skipped.push({ item: from, reason: `an interval of ${h.interval} ${h.intervalUnit} is longer than the 31 days a heartbeat may wait` });
      continue;
    }
    heartbeatNames.add(name);
    const notes: string[] = [];
    if (h.alertMessage || h.alertPriority || (h.alertTags ?? []).length > 0) {
      notes.push(
        `its alert settings (${[h.alertMessage && `message "${h.alertMessage}"`, h.alertPriority && `priority ${h.alertPriority}`, (h.alertTags ?? []).length > 0 && `tags ${(h.alertTags ?? []).join(", ")}`].filter(Boolean).join("; ")}) are not carried: a silent heartbeat's incident is "Heartbeat ${name} missed"`,
      );
    }
    plan.heartbeats.push({
      name,
      from: `${from}${teamOf(h)}`,
      expectedIntervalSeconds: seconds,
      // Opsgenie alerts once the interval passes with no ping: no grace (1 s behaves as none).
      graceSeconds: 1,
      paused: !h.enabled,
      oldPingUrl: `https://api.opsgenie.com/v2/heartbeats/${encodeURIComponent(h.name)}/ping`,
      notes,
    });
  }
  const taken = new Set<string>();
  for (const i of integrations) {
    const from = `Opsgenie ${i.type} integration "${i.name}" (${i.id}${teamOf(i)})`;
    if (i.type !== "API") {
      plan.skipped.push({
        item: from,
        reason: `an integration of type ${i.type} is the tool's own: point that tool at this service as the moving-in guide says (only API integrations become custom sources)`,
      });
      continue;
    }
    const name = sourceNameOf("opsgenie", i.name, i.id, taken);
    taken.add(name);
    const notes = [
      "its sender posts Opsgenie's create-alert body to this source's URL with Authorization: Bearer <secret>; a sender that keeps Opsgenie's paths (/v2/alerts) uses the ingest token instead",
    ];
    if (!i.enabled) notes.push("disabled there: created here all the same; its sender sends nothing until it is enabled");
    plan.sources.push({
      name,
      from,
      rules: alertApiRules(),
      description: [
        `Imported from ${from}.`,
        `Takes Opsgenie's create-alert body: message, alias, priority (P1-P5), description.`,
        ...(i.enabled ? [] : ["Disabled in Opsgenie."]),
      ].join("\n"),
      untranslated: [],
      notes,
    });
  }
  return plan;
}

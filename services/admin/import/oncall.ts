import { z } from "zod";
import { MAX_INTERVAL_SECONDS } from "../../domain/heartbeat-rules.js";
import { describeIssue, ExportShapeError, type ImportPlan, type PlannedSource, type RuleJson, sourceNameOf, type Untranslated } from "./import-plan.js";
import { celString, translateCondition, translateText } from "./jinja-to-cel.js";

/**
 * Grafana OnCall's integrations, as its public API answers `GET /api/v1/integrations/` (one page
 * `{count, next, previous, results}`, several pages one after another or in an array, or the
 * plain list), turned into an import plan: a custom source per integration with the templates
 * that translate as its rules, and a heartbeat where the integration has one with a timeout.
 */

const template = z.string().nullable().optional();

const integration = z
  .object({
    id: z.string({ error: "expected the integration's id, a string" }),
    name: z.string({ error: "expected the integration's name, a string" }),
    type: z.string({ error: "expected the integration's type, a string (webhook, alertmanager, grafana_alerting, ...)" }),
    link: z.string().nullable().optional(),
    description_short: z.string().nullable().optional(),
    templates: z
      .record(z.string(), z.union([z.string(), z.null(), z.record(z.string(), template)]))
      .nullable()
      .optional(),
    heartbeat: z
      .object({
        link: z.string().nullable().optional(),
        timeout_seconds: z.number({ error: "expected timeout_seconds, a number of seconds" }).int().positive().optional(),
      })
      .passthrough()
      .nullable()
      .optional(),
  })
  .passthrough();

type Integration = z.infer<typeof integration>;

const page = z.object({ results: z.array(integration, { error: "expected results, the list of integrations" }) }).passthrough();

/** What a custom source's description holds (custom-source-records.ts). */
const MAX_DESCRIPTION = 16_384;

/** Where each template goes here; the others are reported. */
const BEHAVIOUR = new Set(["grouping_key", "resolve_signal", "acknowledge_signal", "source_link"]);

function channelName(channel: string): string {
  const names: Record<string, string> = {
    slack: "Slack",
    sms: "SMS",
    phone_call: "phone call",
    telegram: "Telegram",
    email: "e-mail",
    msteams: "Microsoft Teams",
    mobile_app: "mobile app",
  };
  return names[channel] ?? channel;
}

/** The integrations of one or several answers; throws ExportShapeError naming the field. */
export function readIntegrations(documents: unknown[]): Integration[] {
  const all: Integration[] = [];
  const add = (doc: unknown, where: string): void => {
    if (Array.isArray(doc) && doc.every((d) => d && typeof d === "object" && "results" in d)) {
      for (const [i, d] of doc.entries()) add(d, `${where}[${i}]`);
      return;
    }
    const parsed = Array.isArray(doc) ? z.array(integration).safeParse(doc) : page.safeParse(doc);
    if (!parsed.success) {
      const hint =
        !Array.isArray(doc) && doc && typeof doc === "object" && !("results" in doc)
          ? " (expected the answer of GET /api/v1/integrations/: {count, next, previous, results: [...]})"
          : "";
      throw new ExportShapeError(`not Grafana OnCall integrations${hint}: ${where ? `${where} ` : ""}${describeIssue(parsed.error.issues[0])}`);
    }
    all.push(...(Array.isArray(parsed.data) ? parsed.data : (parsed.data as { results: Integration[] }).results));
  };
  for (const [i, d] of documents.entries()) add(d, documents.length > 1 ? `document ${i + 1}` : "");
  return all;
}

function originalTemplates(templates: Integration["templates"]): [string, string][] {
  const out: [string, string][] = [];
  for (const [key, value] of Object.entries(templates ?? {})) {
    if (typeof value === "string" && value.trim() !== "") out.push([key, value]);
    else if (value && typeof value === "object") {
      for (const [field, text] of Object.entries(value)) if (typeof text === "string" && text.trim() !== "") out.push([`${key}.${field}`, text]);
    }
  }
  return out;
}

function sourceOf(i: Integration, name: string): PlannedSource {
  const templates = originalTemplates(i.templates);
  const untranslated: Untranslated[] = [];
  const notes: string[] = [];
  const text = (key: string): string | undefined => templates.find(([k]) => k === key)?.[1];
  const translated = (key: string, kind: "text" | "condition"): string | undefined => {
    const t = text(key);
    if (t === undefined) return undefined;
    const result = kind === "text" ? translateText(t) : translateCondition(t);
    if (result.ok) return result.cel;
    untranslated.push({ template: key, text: t, reason: result.reason });
    return undefined;
  };

  const title = translated("web.title", "text");
  const summary = translated("web.message", "text");
  const link = translated("source_link", "text");
  const attachKey = translated("grouping_key", "text");
  const resolve = translated("resolve_signal", "condition");
  for (const [key, t] of templates) {
    if (["web.title", "web.message", "source_link", "grouping_key", "resolve_signal"].includes(key)) continue;
    let reason: string;
    if (key === "acknowledge_signal") reason = "acknowledging is a person's decision here: no rule acknowledges an incident";
    else if (key === "web.image_url") reason = "an incident keeps no image: put the image's link in the summary";
    else if (BEHAVIOUR.has(key)) reason = "no rule field here takes it";
    else {
      const channel = key.split(".")[0]!;
      reason = `a notification template (${channelName(channel)}): here notifications go through subscriptions, whose receivers format their own messages`;
    }
    untranslated.push({ template: key, text: t, reason });
  }
  if (!text("web.title")) notes.push(`no web title template (OnCall used its ${i.type} default): incidents are titled "Alert from ${i.name}"`);
  else if (title === undefined) notes.push(`web.title not translated: incidents are titled "Alert from ${i.name}" until its rule is edited`);

  const rules: RuleJson[] = [];
  if (resolve !== undefined) {
    rules.push({ name: "resolve signal", when: resolve, kind: "'recovery'", ...(attachKey ? { attachKey } : {}) });
    if (!attachKey) notes.push("a resolve signal without a grouping key records on no incident: add an attachKey to both rules");
  }
  rules.push({
    name: "alert",
    title: title ?? celString(`Alert from ${i.name}`),
    ...(attachKey ? { attachKey } : {}),
    ...(summary ? { summary } : {}),
    ...(link ? { link } : {}),
  });
  const full = [
    `Imported from Grafana OnCall integration "${i.name}" (${i.id}, type ${i.type}).`,
    ...(i.description_short ? [i.description_short] : []),
    ...(templates.length > 0 ? ["Its templates, as they were:", ...templates.map(([k, t]) => `--- ${k} ---\n${t}`)] : ["It had no templates of its own."]),
  ].join("\n");
  // The service keeps at most MAX_DESCRIPTION characters; the report has every template in full.
  const description =
    full.length <= MAX_DESCRIPTION
      ? full
      : `${full.slice(0, MAX_DESCRIPTION - 120)}\n… cut here: ${full.length - MAX_DESCRIPTION + 120} more characters, in the import's report`;
  return { name, from: `Grafana OnCall integration "${i.name}" (${i.id})`, rules, description, untranslated, notes };
}

/** The import plan of one or several answers of `GET /api/v1/integrations/`. */
export function planOnCallImport(documents: unknown[]): ImportPlan {
  const plan: ImportPlan = { tool: "Grafana OnCall", sources: [], heartbeats: [], skipped: [] };
  const taken = new Set<string>();
  const seen = new Set<string>();
  for (const i of readIntegrations(documents)) {
    if (seen.has(i.id)) continue; // the same page saved twice
    seen.add(i.id);
    const name = sourceNameOf("oncall", i.name, i.id, taken);
    taken.add(name);
    plan.sources.push(sourceOf(i, name));
    if (i.heartbeat) {
      const timeout = i.heartbeat.timeout_seconds;
      if (timeout === undefined) {
        plan.skipped.push({
          item: `heartbeat of "${i.name}"`,
          reason: "no timeout_seconds (the public API gives only the heartbeat's link): add the timeout set in OnCall to the file as heartbeat.timeout_seconds",
        });
      } else if (timeout > MAX_INTERVAL_SECONDS) {
        plan.skipped.push({ item: `heartbeat of "${i.name}"`, reason: `a timeout of ${timeout}s is longer than the 31 days a heartbeat may wait` });
      } else {
        plan.heartbeats.push({
          name,
          from: `heartbeat of Grafana OnCall integration "${i.name}" (${i.id})`,
          expectedIntervalSeconds: timeout,
          // OnCall alerts once the timeout passes with no ping: no grace (1 s behaves as none).
          graceSeconds: 1,
          paused: false,
          oldPingUrl: i.heartbeat.link ?? "",
          notes: [],
        });
      }
    }
  }
  return plan;
}

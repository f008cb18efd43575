import { z } from "zod";
import {
  asArray,
  asFiniteNumber,
  asHttpUrl,
  asText,
  compactJson,
  firstText,
  isRecord,
  jsonSnapshot,
  looseArray,
  looseText,
  looseValue,
  ownField,
} from "./foreign-json.js";
import { digestOf, toAlertDelivery, type EntityRef } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { cutUtf8 } from "./text-limits.js";
import { parseDateTime } from "./timestamps.js";
import type { MappedDelivery, Severity } from "./types.js";

// Azure Monitor's common alert schema, shared by the cloud-monitor and log-analytics shapes.
//
// Which badge: a common-schema alert whose `signalType` is `Log` (log search alerts, including
// the old Log Analytics and Application Insights log alerts in this schema) is a log-analytics
// alert; every other signal type (Metric, Activity Log, and whatever Azure adds) describes the
// platform's own view of a resource and is a cloud-monitor alert. A rule's signal type never
// changes, so its Fired and Resolved notifications always land under the same badge and identity.

export const AZURE_COMMON_SCHEMA_ID = "azureMonitorCommonAlertSchema";
export const DEFAULT_TITLE = "Azure Monitor alert";

export type AzureBadge = "cloud-monitor" | "log-analytics";

/** Whether the body is an Azure Monitor alert in the common alert schema. */
export function isAzureCommonAlert(body: unknown): boolean {
  return ownField(body, "schemaId") === AZURE_COMMON_SCHEMA_ID && isRecord(ownField(ownField(body, "data"), "essentials"));
}

/**
 * Whether a common-schema alert is a log alert (`signalType: Log`), which is log-analytics rather
 * than cloud-monitor.
 */
export function isLogSignal(body: unknown): boolean {
  const signalType = ownField(ownField(ownField(body, "data"), "essentials"), "signalType");
  return typeof signalType === "string" && signalType.trim().toLowerCase() === "log";
}

const Essentials = z.object({
  alertId: looseText,
  alertRule: looseText,
  alertRuleID: looseText,
  severity: looseValue,
  signalType: looseText,
  monitorCondition: looseText,
  monitoringService: looseText,
  alertTargetIDs: looseArray,
  configurationItems: looseArray,
  firedDateTime: looseText,
  resolvedDateTime: looseText,
  description: looseText,
  targetResourceType: looseText,
  targetResourceGroup: looseText,
});

const CommonAlert = z.object({
  data: z.object({
    essentials: Essentials,
    alertContext: looseValue,
    customProperties: looseValue,
  }),
});

/**
 * A common-schema alert as one delivery under `badge`: Fired opens or attaches to the rule's
 * incident, Resolved records a recovery.
 */
export function mapAzureCommonAlert(body: unknown, badge: AzureBadge): MappedDelivery {
  const parsed = CommonAlert.safeParse(body);
  if (!parsed.success) throw new PayloadError("data.essentials", "data.essentials must be an object");
  const { essentials, alertContext, customProperties } = parsed.data.data;

  const condition = essentials.monitorCondition?.toLowerCase();
  if (condition !== "fired" && condition !== "resolved") {
    throw new PayloadError("data.essentials.monitorCondition", "data.essentials.monitorCondition must be Fired or Resolved");
  }
  const ruleKey = (essentials.alertRuleID ?? essentials.alertRule)?.toLowerCase();
  if (ruleKey === undefined) {
    throw new PayloadError("data.essentials.alertRule", "data.essentials.alertRule or alertRuleID is required");
  }
  const targets = texts(essentials.alertTargetIDs);
  const configurationItems = texts(essentials.configurationItems);
  const resolved = condition === "resolved";
  const conditions = asArray(ownField(ownField(alertContext, "condition"), "allOf")) ?? [];
  const firstCondition = conditions[0];

  return toAlertDelivery({
    source: badge,
    attachIdentity: attachIdentity(badge, ruleKey, targets, configurationItems),
    // One alert instance fires once and resolves once; Azure retries a failed call with the same
    // body, so the instance id and its condition identify the notification.
    eventId:
      essentials.alertId !== undefined
        ? `${essentials.alertId.toLowerCase()}:${condition}`
        : digestOf([ruleKey, ...targets, condition, essentials.firedDateTime ?? "", essentials.resolvedDateTime ?? ""]),
    kind: resolved ? "recovery" : "alert",
    title: essentials.alertRule ?? DEFAULT_TITLE,
    severity: azureSeverity(essentials.severity),
    entity: resourceEntity(configurationItems),
    summary: essentials.description ?? `${essentials.alertRule ?? DEFAULT_TITLE} ${resolved ? "resolved" : "fired"}`,
    link: asHttpUrl(ownField(firstCondition, "linkToFilteredSearchResultsUI")) ?? asHttpUrl(ownField(firstCondition, "linkToSearchResultsUI")),
    alertRef: essentials.alertId,
    occurredAt: resolved ? (parseDateTime(essentials.resolvedDateTime) ?? parseDateTime(essentials.firedDateTime)) : parseDateTime(essentials.firedDateTime),
    data: compactJson({
      schema: "common",
      alertRule: essentials.alertRule,
      alertRuleId: essentials.alertRuleID,
      signalType: essentials.signalType,
      monitoringService: essentials.monitoringService,
      monitorCondition: essentials.monitorCondition,
      severity: asText(essentials.severity),
      targetResourceType: essentials.targetResourceType,
      targetResourceGroup: essentials.targetResourceGroup,
      alertTargetIDs: targets.slice(0, 20),
      configurationItems: configurationItems.slice(0, 20),
      conditionType: firstText(ownField(alertContext, "conditionType")),
      conditions: conditions.slice(0, 10).map(conditionSummary),
      customProperties:
        customProperties === null || customProperties === undefined
          ? undefined
          : jsonSnapshot(customProperties, { maxDepth: 3, maxEntries: 50, maxStringBytes: 2048 }),
    }),
  });
}

/**
 * The rule and what it watches: the rule's id and, because one rule can cover many resources,
 * the target resource ids and the configuration items (the resources a log alert's dimensions
 * name). Azure spells resource ids with varying case (`resourceGroups` vs `resourcegroups`) and
 * they are case-insensitive, so all parts are lowercased; order is sorted away.
 */
function attachIdentity(badge: AzureBadge, ruleKey: string, targets: string[], items: string[]): string {
  const normalize = (values: string[]) => [...new Set(values.map((value) => value.toLowerCase()))].sort().join(",");
  return `${badge}:azure:${ruleKey}|${normalize(targets)}|${normalize(items)}`;
}

/**
 * `configurationItems` are the names of the affected resources (`vm-checkout-01`). The first one
 * becomes the entity `{kind: "resource"}`; a name, unlike a full resource id, is what a person
 * types into a maintenance window.
 */
export function resourceEntity(configurationItems: readonly string[]): EntityRef | undefined {
  const first = configurationItems[0];
  return first === undefined ? undefined : { kind: "resource", id: first };
}

const NAMED_SEVERITIES: Readonly<Record<string, Severity>> = {
  sev0: "sev1",
  sev1: "sev2",
  sev2: "sev3",
  sev3: "sev4",
  sev4: "sev4",
  "0": "sev1",
  "1": "sev2",
  "2": "sev3",
  "3": "sev4",
  "4": "sev4",
  critical: "sev1",
  error: "sev2",
  warning: "sev3",
  informational: "sev4",
  verbose: "sev4",
};

/**
 * Azure counts from Sev0 (critical) to Sev4 (verbose), one step more than sev1..sev4, so the two
 * lowest Azure levels share sev4. The older log alert payload spells the levels as words or
 * digits. Anything else is sev3, the same default as every other source.
 */
export function azureSeverity(value: unknown): Severity {
  const key = typeof value === "number" ? String(value) : asText(value)?.toLowerCase();
  if (key === undefined || !Object.hasOwn(NAMED_SEVERITIES, key)) return "sev3";
  return NAMED_SEVERITIES[key] ?? "sev3";
}

function conditionSummary(condition: unknown) {
  return compactJson({
    metricName: firstText(ownField(condition, "metricName")),
    metricNamespace: firstText(ownField(condition, "metricNamespace")),
    searchQuery: cutUtf8(firstText(ownField(condition, "searchQuery")) ?? "", 2048) || undefined,
    operator: firstText(ownField(condition, "operator")),
    threshold: firstText(ownField(condition, "threshold")),
    metricValue: asFiniteNumber(ownField(condition, "metricValue")),
  });
}

/** The non-blank strings among the first `max` values, trimmed. */
export function texts(values: readonly unknown[] | undefined, max = 100): string[] {
  if (values === undefined) return [];
  return values.slice(0, max).flatMap((value) => asText(value) ?? []);
}

import { z } from "zod";
import { azureSeverity, isAzureCommonAlert, isLogSignal, mapAzureCommonAlert, resourceEntity, texts } from "./azure-common-alert.js";
import { asHttpUrl, asText, compactJson, jsonSnapshot, looseArray, looseIdentifier, looseText, looseValue, ownField } from "./foreign-json.js";
import { digestOf, toAlertDelivery } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { cutUtf8 } from "./text-limits.js";
import { parseDateTime } from "./timestamps.js";
import type { MapContext, MappedDelivery } from "./types.js";

// Log search alerts from Azure Monitor: the common alert schema with signal type `Log` (see
// azure-common-alert.ts for why the other signal types are cloud-monitor alerts), and the older
// Log Analytics / Application Insights log alert webhook that predates the common schema.

export const badge = "log-analytics" as const;
export const DEFAULT_TITLE = "Log search alert";

/**
 * Whether the body is a log-analytics shape: an Azure common alert with a log signal, or the older
 * flat Log Analytics webhook.
 */
export function recognize(body: unknown): boolean {
  return (isAzureCommonAlert(body) && isLogSignal(body)) || isLegacyLogAlert(body);
}

/** A log-analytics body as one delivery on the rule's incident. */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  if (isAzureCommonAlert(body)) return mapAzureCommonAlert(body, badge);
  if (isLegacyLogAlert(body)) return mapLegacyLogAlert(body);
  throw new PayloadError("schemaId", `schemaId must be azureMonitorCommonAlertSchema, or AlertRuleName and WorkspaceId are required`);
}

/** The older body is flat: the rule name beside the workspace (or Application Insights app) id. */
function isLegacyLogAlert(body: unknown): boolean {
  return (
    asText(ownField(body, "AlertRuleName")) !== undefined &&
    (asText(ownField(body, "WorkspaceId")) !== undefined || asText(ownField(body, "ApplicationId")) !== undefined)
  );
}

const LegacyLogAlert = z.object({
  AlertRuleName: looseText,
  WorkspaceId: looseText,
  ApplicationId: looseText,
  SubscriptionId: looseText,
  SearchQuery: looseText,
  SearchIntervalStartTimeUtc: looseText,
  SearchIntervalEndtimeUtc: looseText,
  AlertThresholdOperator: looseText,
  AlertThresholdValue: looseIdentifier,
  ResultCount: looseIdentifier,
  Description: looseText,
  Severity: looseValue,
  AlertType: looseText,
  LinkToFilteredSearchResultsUI: looseText,
  LinkToSearchResults: looseText,
  LinkToSearchResultsUI: looseText,
  AffectedConfigurationItems: looseArray,
  Dimensions: looseValue,
});

/**
 * These alerts are stateless: the rule fires on every evaluation that matches and never sends a
 * resolve. The identity is therefore the rule within its workspace, so every firing of one rule
 * lands on the same open incident, and each evaluation window is one notification.
 */
function mapLegacyLogAlert(body: unknown): MappedDelivery {
  const parsed = LegacyLogAlert.safeParse(body);
  if (!parsed.success || parsed.data.AlertRuleName === undefined) {
    throw new PayloadError("AlertRuleName", "AlertRuleName is required");
  }
  const alert = parsed.data;
  const ruleName = parsed.data.AlertRuleName;
  const scope = (alert.WorkspaceId ?? alert.ApplicationId ?? "").toLowerCase();
  const items = texts(alert.AffectedConfigurationItems);
  const windowStart = alert.SearchIntervalStartTimeUtc;
  const windowEnd = alert.SearchIntervalEndtimeUtc;

  return toAlertDelivery({
    source: badge,
    attachIdentity: `${badge}:legacy:${scope}:${ruleName.toLowerCase()}`,
    eventId: windowStart === undefined && windowEnd === undefined ? "" : digestOf([scope, ruleName, windowStart ?? "", windowEnd ?? ""]),
    kind: "alert",
    title: ruleName,
    severity: azureSeverity(alert.Severity),
    entity: resourceEntity(items),
    summary: alert.Description ?? (alert.ResultCount !== undefined ? `${alert.ResultCount} results matched ${ruleName}` : undefined),
    link: asHttpUrl(alert.LinkToFilteredSearchResultsUI) ?? asHttpUrl(alert.LinkToSearchResultsUI) ?? asHttpUrl(alert.LinkToSearchResults),
    alertRef: ruleName,
    occurredAt: parseDateTime(windowEnd),
    data: compactJson({
      schema: "legacy",
      workspaceId: alert.WorkspaceId,
      applicationId: alert.ApplicationId,
      subscriptionId: alert.SubscriptionId,
      searchQuery: alert.SearchQuery === undefined ? undefined : cutUtf8(alert.SearchQuery, 2048),
      searchIntervalStart: windowStart,
      searchIntervalEnd: windowEnd,
      thresholdOperator: alert.AlertThresholdOperator,
      thresholdValue: alert.AlertThresholdValue,
      resultCount: alert.ResultCount,
      alertType: alert.AlertType,
      severity: typeof alert.Severity === "number" ? alert.Severity : asText(alert.Severity),
      affectedConfigurationItems: items.slice(0, 20),
      dimensions: alert.Dimensions === undefined ? undefined : jsonSnapshot(alert.Dimensions, { maxDepth: 2, maxEntries: 20, maxStringBytes: 1024 }),
    }),
  });
}

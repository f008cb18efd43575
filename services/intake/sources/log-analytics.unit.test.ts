import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as logAnalytics from "./log-analytics.js";
import { PayloadError } from "./payload-error.js";
import type { AlertInit } from "./types.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8"));
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

function alertOf(body: unknown): AlertInit {
  const delivery = logAnalytics.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

const logAlert = () => fixture("azure/common-schema-log-alerts-v2-fired.json");
const LOG_IDENTITY =
  "log-analytics:azure:/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/resourcegroups/rg-checkout-prod/providers/microsoft.insights/scheduledqueryrules/checkout-5xx-in-app-logs" +
  "|/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/resourcegroups/rg-checkout-prod/providers/microsoft.operationalinsights/workspaces/law-checkout-prod" +
  "|vm-checkout-01";

// The pre-common-schema log alert webhook, with the fields its documentation lists.
const legacyLogAlert = {
  SubscriptionId: "6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f",
  AlertRuleName: "checkout-5xx",
  SearchQuery: "AppServiceHTTPLogs | where ScStatus >= 500",
  SearchIntervalStartTimeUtc: "2024-06-12T09:57:49Z",
  SearchIntervalEndtimeUtc: "2024-06-12T10:07:49Z",
  AlertThresholdOperator: "Greater Than",
  AlertThresholdValue: 20,
  ResultCount: 57,
  SearchIntervalInSeconds: 600,
  LinkToSearchResults: "https://portal.azure.com/#Analyticsblade/search/index?q=x",
  LinkToFilteredSearchResultsUI: "https://portal.azure.com/#Analyticsblade/search/index?q=filtered",
  LinkToSearchResultsAPI: "https://api.loganalytics.io/v1/workspaces/w/query?query=x",
  Description: "More than 20 HTTP 5xx in 10 minutes",
  Severity: "Warning",
  AffectedConfigurationItems: ["vm-checkout-01"],
  Dimensions: [{ name: "Computer", value: "vm-checkout-01" }],
  SearchResult: { tables: [{ name: "PrimaryResult", columns: [], rows: [] }] },
  WorkspaceId: "7D0C2A1E-1111-4C3A-9E8F-1A2B3C4D5E6F",
  AlertType: "Number of results",
};

describe("Azure common-schema log search alerts", () => {
  it("Log Alerts V2 fixture opens on the rule + workspace + configuration item", () => {
    const body = logAlert();
    expect(logAnalytics.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "log-analytics",
      attachIdentity: LOG_IDENTITY,
      eventId: "/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/providers/microsoft.alertsmanagement/alerts/1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b:fired",
      kind: "alert",
      title: "checkout-5xx-in-app-logs",
      severity: "sev2",
      entity: { kind: "resource", id: "vm-checkout-01" },
      summary: "More than 20 HTTP 5xx in AppServiceHTTPLogs over 10 minutes",
      alertRef: body.data.essentials.alertId,
      occurredAt: expect.objectContaining({ seconds: 1718186869n, nanos: 442_103_100 }),
    });
    expect(alert.link).toBe(body.data.alertContext.condition.allOf[0].linkToFilteredSearchResultsUI);
    expect(alert.data).toMatchObject({ signalType: "Log", conditionType: "LogQueryCriteria", monitoringService: "Log Alerts V2" });
  });

  it("its Resolved notification is a recovery on the same identity", () => {
    const body = logAlert();
    body.data.essentials.monitorCondition = "Resolved";
    body.data.essentials.resolvedDateTime = "2024-06-12T10:37:49.1Z";
    const alert = alertOf(body);
    expect(alert.kind).toBe("recovery");
    expect(alert.attachIdentity).toBe(LOG_IDENTITY);
    expect(alert.occurredAt).toMatchObject({ seconds: 1718188669n, nanos: 100_000_000 });
  });

  it("a different affected resource of the same rule is a different alert", () => {
    const body = logAlert();
    body.data.essentials.configurationItems = ["vm-checkout-02"];
    expect(alertOf(body).attachIdentity).not.toBe(LOG_IDENTITY);
  });

  it("without alertRuleID (older essentials) the rule name identifies the rule", () => {
    const body = logAlert();
    delete body.data.essentials.alertRuleID;
    expect(alertOf(body).attachIdentity).toMatch(/^log-analytics:azure:checkout-5xx-in-app-logs\|/);
  });

  it("without the alert instance id the event id is a digest of what identifies the notification", () => {
    const body = logAlert();
    delete body.data.essentials.alertId;
    expect(alertOf(body).eventId).toMatch(/^[0-9a-f]{64}$/);
    expect(alertOf(body).eventId).toBe(alertOf(structuredClone(body)).eventId);
  });

  it("metric alerts are not log-analytics alerts", () => {
    expect(logAnalytics.recognize(fixture("azure/common-schema-metric-alert-resolved.json"))).toBe(false);
  });

  it.each([
    ["monitorCondition missing", (body: any) => delete body.data.essentials.monitorCondition, "data.essentials.monitorCondition"],
    ["monitorCondition unknown", (body: any) => (body.data.essentials.monitorCondition = "Muted"), "data.essentials.monitorCondition"],
    [
      "no rule at all",
      (body: any) => {
        delete body.data.essentials.alertRule;
        delete body.data.essentials.alertRuleID;
      },
      "data.essentials.alertRule",
    ],
  ])("refused: %s", (_name, change, field) => {
    const body = logAlert();
    change(body);
    try {
      logAnalytics.map(body, context);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(PayloadError);
      expect((error as PayloadError).field).toBe(field);
    }
  });
});

describe("legacy Log Analytics webhook", () => {
  it("is recognized by the rule name beside a workspace or application id", () => {
    expect(logAnalytics.recognize(legacyLogAlert)).toBe(true);
    const { WorkspaceId: _workspace, ...withoutWorkspace } = legacyLogAlert;
    expect(logAnalytics.recognize(withoutWorkspace)).toBe(false);
    expect(logAnalytics.recognize({ ...withoutWorkspace, ApplicationId: "8e20151d-75b2-4d66-b965-153fb69d65a6" })).toBe(true);
    expect(logAnalytics.recognize({ AlertRuleName: "x" })).toBe(false);
  });

  it("maps the rule, its window and links", () => {
    const alert = alertOf(legacyLogAlert);
    expect(alert).toMatchObject({
      source: "log-analytics",
      attachIdentity: "log-analytics:legacy:7d0c2a1e-1111-4c3a-9e8f-1a2b3c4d5e6f:checkout-5xx",
      eventId: expect.stringMatching(/^[0-9a-f]{64}$/),
      kind: "alert",
      title: "checkout-5xx",
      severity: "sev3",
      entity: { kind: "resource", id: "vm-checkout-01" },
      summary: "More than 20 HTTP 5xx in 10 minutes",
      link: "https://portal.azure.com/#Analyticsblade/search/index?q=filtered",
      alertRef: "checkout-5xx",
      occurredAt: expect.objectContaining({ seconds: 1718186869n }),
    });
    expect(alert.data).toMatchObject({ schema: "legacy", resultCount: "57", searchQuery: legacyLogAlert.SearchQuery });
  });

  it("every firing of a rule attaches; each evaluation window is one notification", () => {
    const next = { ...legacyLogAlert, SearchIntervalStartTimeUtc: "2024-06-12T10:07:49Z", SearchIntervalEndtimeUtc: "2024-06-12T10:17:49Z" };
    expect(alertOf(next).attachIdentity).toBe(alertOf(legacyLogAlert).attachIdentity);
    expect(alertOf(next).eventId).not.toBe(alertOf(legacyLogAlert).eventId);
    expect(alertOf({ ...legacyLogAlert }).eventId).toBe(alertOf(legacyLogAlert).eventId);
  });

  it.each<[unknown, string]>([
    ["Critical", "sev1"],
    ["Error", "sev2"],
    ["Warning", "sev3"],
    ["Informational", "sev4"],
    ["Verbose", "sev4"],
    [0, "sev1"],
    ["1", "sev2"],
    [4, "sev4"],
    [undefined, "sev3"],
  ])("severity %j → %s", (severity, expected) => {
    expect(alertOf({ ...legacyLogAlert, Severity: severity }).severity).toBe(expected);
  });

  it("falls back to the result count for the summary and the plain search link", () => {
    const { Description: _d, LinkToFilteredSearchResultsUI: _l, ...rest } = legacyLogAlert;
    const alert = alertOf(rest);
    expect(alert.summary).toBe("57 results matched checkout-5xx");
    expect(alert.link).toBe(legacyLogAlert.LinkToSearchResults);
  });
});

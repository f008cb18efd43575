import * as alertRouter from "./own-routes/alert-router.js";
import * as chat from "./own-routes/chat.js";
import * as cloudMonitor from "./cloud-monitor.js";
import * as errorTracker from "./error-tracker.js";
import * as logAnalytics from "./log-analytics.js";
import * as metricsMonitor from "./metrics-monitor.js";
import * as remote from "./remote.js";
import type { TriggerSource } from "./types.js";

export { PayloadError } from "./payload-error.js";
export { parseChatForm } from "./own-routes/chat.js";
export type {
  AlertDelivery,
  AlertInit,
  AlertKind,
  IgnoredDelivery,
  MapContext,
  MappedDelivery,
  Severity,
  SourceBadge,
  SubscriptionNoticeDelivery,
  TriggerSource,
} from "./types.js";

export const remoteSource: TriggerSource = remote;
export const cloudMonitorSource: TriggerSource = cloudMonitor;
export const metricsMonitorSource: TriggerSource = metricsMonitor;
export const logAnalyticsSource: TriggerSource = logAnalytics;
export const errorTrackerSource: TriggerSource = errorTracker;
/** Has its own route (`/triggers/alertrouter`); not part of the shared endpoint's order. */
export const alertRouterSource: TriggerSource = alertRouter;
/** Has its own route (`/triggers/chat/{org_slug}`); not part of the shared endpoint's order. */
export const chatSource: TriggerSource = chat;

/**
 * The shared endpoint's order of checking. The spec fixes cloud-monitor, metrics-monitor,
 * log-analytics, error-tracker, and leaves the remote shape's place open. Remote goes first: it
 * is recognized by an explicit `serviceSource: "remote"` that no vendor sends, so a remote body
 * that also happens to carry, say, a `tags` array is still read as what its sender declared.
 */
export const SHARED_TRIGGER_ORDER: readonly TriggerSource[] = [remoteSource, cloudMonitorSource, metricsMonitorSource, logAnalyticsSource, errorTrackerSource];

/** The source whose shape the body has, for `POST /triggers`; undefined means 422. */
export function recognizeTrigger(body: unknown): TriggerSource | undefined {
  return SHARED_TRIGGER_ORDER.find((source) => source.recognize(body));
}

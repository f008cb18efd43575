import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import type { AlertSchema } from "../../../gen/warroom/incidents/v1/incidents_pb.js";

/** The badge on the incident row: which kind of system opened it. */
export type SourceBadge =
  | "metrics-monitor"
  | "cloud-monitor"
  | "log-analytics"
  | "error-tracker"
  | "remote"
  | "alert-router"
  | "chat"
  | "pagerduty-events"
  | "opsgenie";

export type Severity = "sev1" | "sev2" | "sev3" | "sev4";

/** What the delivery says about the thing it watches; the incident core decides the outcome. */
export type AlertKind = "alert" | "recovery" | "no_data" | "acknowledge" | "change";

export type AlertInit = MessageInitShape<typeof AlertSchema>;

export interface MapContext {
  /** When the delivery reached us; the time of an entry whose body carries none. */
  receivedAt: Date;
}

/** A delivery that becomes an Alert for the incident core to open, attach or record. */
export interface AlertDelivery {
  alert: AlertInit;
  outcome?: undefined;
}

/** A delivery the spec says to answer 200 `ignored` without touching any incident. */
export interface IgnoredDelivery {
  outcome: "ignored";
  reason: string;
  alert?: undefined;
}

/**
 * An SNS subscription handshake. It is never an alert, and the endpoint must not fetch the URLs
 * it carries: anyone can post such a body, so following them would let a caller make us request
 * arbitrary addresses. An operator confirms with the token instead.
 */
export interface SubscriptionNoticeDelivery {
  outcome: "subscription-notice";
  messageType: "SubscriptionConfirmation" | "UnsubscribeConfirmation";
  topicArn: string;
  messageId?: string;
  /** Lets an operator confirm out of band (`aws sns confirm-subscription`). */
  token?: string;
  /** Only kept when it points at the SNS API of an AWS region; shown to operators, never fetched. */
  subscribeUrl?: string;
  reason: string;
  alert?: undefined;
}

export type MappedDelivery = AlertDelivery | IgnoredDelivery | SubscriptionNoticeDelivery;

/** One source shape: every module in this folder has this surface. */
export interface TriggerSource {
  readonly badge: SourceBadge;
  recognize(body: unknown): boolean;
  /** Throws only PayloadError, and only for a body `recognize` accepted but cannot map. */
  map(body: unknown, context: MapContext): MappedDelivery;
}

export type { JsonObject };

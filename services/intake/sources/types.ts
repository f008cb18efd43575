import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import type { Alert, AlertSchema } from "../../../gen/warroom/incidents/v1/incidents_pb.js";

// The badge on the incident row (which kind of system opened it), the severity and what the
// delivery says about the thing it watches (the incident core decides the outcome): their values
// are the `string.in` rules of the schema's Alert, checked on every delivery the core receives.
export type SourceBadge = Alert["source"];
export type Severity = Alert["severity"];
export type AlertKind = Alert["kind"];

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

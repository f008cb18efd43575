import { create, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type {
  HeartbeatSilent,
  IncidentOpened,
  IncidentResolved,
  IncidentUnacknowledged,
  TimelineRecorded,
  UpdateSent,
} from "../../gen/warroom/events/v1/events_pb.js";
import type { EventTypeName } from "./event-names.js";
import {
  HeartbeatEventDataSchema,
  type IncidentEventData,
  IncidentEventDataSchema,
  UpdateSentEventDataSchema,
} from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";

export { EVENT_TYPES, type EventTypeName, isEventType } from "./event-names.js";

/** The type of the event SendTestEvent sends; no subscription names it. */
export const TEST_EVENT_TYPE = "subscription.test";

/** One event as subscribers receive it: the org it belongs to, its type, when, and its data. */
export interface WebhookEvent {
  orgId: string;
  type: EventTypeName;
  at: Date;
  /** Builds the `data` of the envelope, given the organization's slug (for workspace URLs). */
  data(orgSlug: string): JsonValue;
}

/** `${PUBLIC_URL}/o/{org}/incidents/{id}`, as DESIGN.md pins it. */
export function workspaceUrl(publicUrl: string, orgSlug: string, incidentId: string): string {
  return `${publicUrl.replace(/\/+$/, "")}/o/${encodeURIComponent(orgSlug)}/incidents/${encodeURIComponent(incidentId)}`;
}

const dateOf = (at: Timestamp | undefined) => (at ? timestampDate(at) : new Date());

function dataOf<Desc extends DescMessage>(schema: Desc, init: (slug: string) => Parameters<typeof create<Desc>>[1]): (slug: string) => JsonValue {
  return (slug) => toJson(schema, create(schema, init(slug)) as MessageShape<Desc>);
}

/** The fields every event about an incident shares, as IncidentEventData. */
interface IncidentEventSource {
  orgId: string;
  incidentId: string;
  at?: Timestamp;
}

/**
 * An incident's event: its organization, incident, link, kind and time, and `more` (the
 * fields of its own kind).
 */
function incidentEvent(
  publicUrl: string,
  e: IncidentEventSource,
  type: EventTypeName,
  kind: string,
  more: Partial<Pick<IncidentEventData, "title" | "severity" | "source" | "step" | "steps" | "minutes" | "actor">> & { deadline?: Timestamp } = {},
): WebhookEvent {
  return {
    orgId: e.orgId,
    type,
    at: dateOf(e.at),
    data: dataOf(IncidentEventDataSchema, (org) => ({
      org,
      incidentId: e.incidentId,
      workspaceUrl: workspaceUrl(publicUrl, org, e.incidentId),
      kind,
      ...(e.at ? { at: e.at } : {}),
      ...more,
    })),
  };
}

/** incident.opened, from the incident core's opened event. */
export function fromIncidentOpened(publicUrl: string, e: IncidentOpened): WebhookEvent {
  return incidentEvent(publicUrl, e, "incident.opened", "opened", { title: e.title, severity: e.severity, source: e.source });
}

/**
 * incident.unacknowledged: a step of the organization's acknowledgement deadlines passed. Its
 * timeline entry (kind `unacknowledged`) is not an event of its own: this one carries the step.
 */
export function fromIncidentUnacknowledged(publicUrl: string, e: IncidentUnacknowledged): WebhookEvent {
  return incidentEvent(publicUrl, e, "incident.unacknowledged", "unacknowledged", {
    title: e.title,
    severity: e.severity,
    source: e.source,
    step: e.step,
    steps: e.steps,
    minutes: e.minutes,
    ...(e.deadline ? { deadline: e.deadline } : {}),
  });
}

/** Timeline kinds that are webhook events of their own, and the type each becomes. */
const TIMELINE_EVENT_TYPES: Partial<Record<string, EventTypeName>> = {
  repeat: "incident.repeat",
  recovery: "incident.recovery",
  no_data: "incident.no_data",
  resumed: "heartbeat.resumed",
  // Written once per run, when an investigation has read the connected remote sources.
  investigation: "incident.investigation_completed",
  ...severityChangedTimelineKind(),
  // A responder's acknowledgement (or a drop-in sender's), owner change and note.
  acknowledged: "incident.acknowledged",
  owner_changed: "incident.owner_changed",
  note: "incident.note_added",
};

/**
 * incident.severity_changed. The incident core records a severity change as a timeline entry of
 * kind `severity_changed` (DESIGN.md section 3), so it arrives as any other timeline event. If a
 * dedicated domain event is added for it, map it here and subscribe to it in fan-out.ts.
 */
function severityChangedTimelineKind(): Partial<Record<string, EventTypeName>> {
  return { severity_changed: "incident.severity_changed" };
}

/**
 * The webhook event a timeline entry is, or undefined for kinds that have their own domain event
 * (opened, resolved, archived) or are not offered (update entries: comms.update_sent covers them).
 */
export function fromTimelineRecorded(publicUrl: string, e: TimelineRecorded): WebhookEvent | undefined {
  const type = TIMELINE_EVENT_TYPES[e.kind];
  if (!type) return undefined;
  if (type === "heartbeat.resumed") {
    return {
      orgId: e.orgId,
      type,
      at: dateOf(e.at),
      data: dataOf(HeartbeatEventDataSchema, (org) => ({
        org,
        incidentId: e.incidentId,
        workspaceUrl: workspaceUrl(publicUrl, org, e.incidentId),
        ...(e.at ? { at: e.at } : {}),
      })),
    };
  }
  return incidentEvent(publicUrl, e, type, e.kind);
}

/** incident.resolved or incident.archived. */
export function fromIncidentResolved(publicUrl: string, e: IncidentResolved): WebhookEvent | undefined {
  const type = e.state === "resolved" ? "incident.resolved" : e.state === "archived" ? "incident.archived" : undefined;
  if (!type) return undefined;
  return incidentEvent(publicUrl, e, type, e.state, { actor: e.actor });
}

export function fromHeartbeatSilent(e: HeartbeatSilent): WebhookEvent {
  return {
    orgId: e.orgId,
    type: "heartbeat.silent",
    at: dateOf(e.at),
    data: dataOf(HeartbeatEventDataSchema, (org) => ({ org, name: e.name, silentSeconds: e.silentSeconds, ...(e.at ? { at: e.at } : {}) })),
  };
}

export function fromUpdateSent(publicUrl: string, e: UpdateSent): WebhookEvent {
  return {
    orgId: e.orgId,
    type: "comms.update_sent",
    at: dateOf(e.at),
    data: dataOf(UpdateSentEventDataSchema, (org) => ({
      org,
      incidentId: e.incidentId,
      workspaceUrl: workspaceUrl(publicUrl, org, e.incidentId),
      messageId: e.messageId,
      state: e.state,
      ...(e.at ? { at: e.at } : {}),
    })),
  };
}

/** The body of a delivery: the Standard Webhooks envelope `{type, timestamp, data}`. */
export function envelope(type: string, at: Date, data: JsonValue): string {
  return JSON.stringify({ type, timestamp: at.toISOString(), data });
}

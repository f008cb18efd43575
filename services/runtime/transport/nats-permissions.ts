import type { DescService } from "@bufbuild/protobuf";
import { CORRELATION_CHANGED, CUSTOM_SOURCE_CHANGED, GROUPING_OVERRIDES_CHANGED, REMOTE_SOURCE_CHANGED, SUBSCRIPTION_CREATED } from "./broadcast.js";
import { internalServices } from "./clients.js";
import { deadLetterStreamName, eventsStreamName, inboxPrefix, prefixed } from "./nats-connection.js";
import { isPublicMethod } from "../http/public-surface.js";
import { subjectForPath } from "./nats-transport.js";

/**
 * Least-privilege NATS users, one per service process: each subscribes only to its own service's
 * RPC subjects and its own reply inbox, and publishes only the calls it makes. The gateway may
 * call the public methods (those with an HTTP route) and identity's Authenticate, never
 * Bootstrap, Record or the other internal methods, and publishes no event. Identity may publish broadcast notices;
 * intake, subscriptions and remotesource each only the one notice of their own (a changed custom
 * source, a created subscription, a changed remote-source connection).
 * `npm run nats-config` renders these as a nats-server `authorization` block; the file under
 * `deploy/` is checked against it.
 */
export const NATS_USERS = ["gateway", "identity", "intake", "incidents", "heartbeats", "comms", "remotesource", "subscriptions"] as const;
export type NatsUser = (typeof NATS_USERS)[number];

const SERVES: Record<NatsUser, string | undefined> = {
  gateway: undefined,
  identity: "warroom.identity.v1.IdentityService",
  intake: "warroom.intake.v1.IntakeService",
  incidents: "warroom.incidents.v1.IncidentsService",
  heartbeats: "warroom.heartbeats.v1.HeartbeatsService",
  comms: "warroom.comms.v1.CommsService",
  remotesource: "warroom.remotesource.v1.RemoteSourcesService",
  subscriptions: "warroom.subscriptions.v1.SubscriptionsService",
};

const AUTHENTICATE = "warroom.identity.v1.IdentityService/Authenticate";

/** The internal calls each service makes (`Service/Method`); authorize() calls Authenticate. */
const INTERNAL_CALLS: Record<NatsUser, string[]> = {
  gateway: [AUTHENTICATE],
  identity: [AUTHENTICATE],
  intake: [
    AUTHENTICATE,
    "warroom.identity.v1.IdentityService/ResolveIngestToken",
    "warroom.identity.v1.IdentityService/ResolveReceiverSecret",
    "warroom.incidents.v1.IncidentsService/Record",
    // Deliveries that arrive while the calls in flight are busy go together (record-groups.ts).
    "warroom.incidents.v1.IncidentsService/RecordMany",
    // A recognized retry reads the state of the incident its first delivery opened.
    "warroom.incidents.v1.IncidentsService/IncidentState",
    // A PagerDuty change event is recorded on the latest open incident of its source.
    "warroom.incidents.v1.IncidentsService/FindLatestOpen",
    "warroom.remotesource.v1.RemoteSourcesService/ResolveConnection",
    // Config as code reads and changes heartbeats, maintenance windows and acknowledgement
    // deadlines through their services, with the caller's credential (config-schedules.ts).
    "warroom.heartbeats.v1.HeartbeatsService/ListHeartbeats",
    "warroom.heartbeats.v1.HeartbeatsService/RegisterHeartbeat",
    "warroom.heartbeats.v1.HeartbeatsService/UpdateHeartbeat",
    "warroom.heartbeats.v1.HeartbeatsService/DeleteHeartbeat",
    "warroom.incidents.v1.IncidentsService/ListMaintenanceWindows",
    "warroom.incidents.v1.IncidentsService/CreateMaintenanceWindow",
    "warroom.incidents.v1.IncidentsService/DeleteMaintenanceWindow",
    "warroom.incidents.v1.IncidentsService/GetEscalationPolicy",
    "warroom.incidents.v1.IncidentsService/PutEscalationPolicy",
  ],
  incidents: [AUTHENTICATE],
  heartbeats: [
    AUTHENTICATE,
    // Pings resolve the ingest token through the same cache as the trigger endpoint.
    "warroom.identity.v1.IdentityService/ResolveIngestToken",
    "warroom.incidents.v1.IncidentsService/Record",
    "warroom.incidents.v1.IncidentsService/RecordMany",
    "warroom.incidents.v1.IncidentsService/GetMaintenanceWindowEnd",
  ],
  comms: [
    AUTHENTICATE,
    "warroom.identity.v1.IdentityService/GetOrganization",
    "warroom.incidents.v1.IncidentsService/AppendTimeline",
    "warroom.incidents.v1.IncidentsService/GetIncident",
    "warroom.incidents.v1.IncidentsService/Record",
  ],
  remotesource: [
    AUTHENTICATE,
    // An investigation reads the incident, links its timeline entry into the organization's room, and writes it.
    "warroom.incidents.v1.IncidentsService/IncidentState",
    "warroom.identity.v1.IdentityService/GetOrganization",
    "warroom.incidents.v1.IncidentsService/AppendTimeline",
  ],
  // Each delivery follows the organization's real-egress switch, which comms owns.
  subscriptions: [AUTHENTICATE, "warroom.comms.v1.CommsService/EgressEnabled"],
};

function publicMethodPaths(services: readonly DescService[]): string[] {
  return services.flatMap((s) => s.methods.filter(isPublicMethod).map((m) => `${s.typeName}/${m.name}`));
}

export interface NatsPermissions {
  publish: { allow: string[] };
  subscribe: { allow: string[] };
  allow_responses: boolean;
}

/**
 * The publish and subscribe permissions of one service's NATS user: its own calls and answers, the
 * events it publishes and consumes, and the JetStream API of its streams.
 */
export function natsPermissions(user: NatsUser, subjectPrefix = ""): NatsPermissions {
  const stream = eventsStreamName(subjectPrefix);
  const calls = new Set(INTERNAL_CALLS[user]);
  if (user === "gateway") for (const path of publicMethodPaths(internalServices)) calls.add(path);
  const served = SERVES[user];
  const deadLetters = deadLetterStreamName(subjectPrefix);
  const jetstream = [
    "$JS.API.INFO",
    `$JS.API.STREAM.INFO.${stream}`,
    `$JS.API.STREAM.CREATE.${stream}`,
    `$JS.API.STREAM.INFO.${deadLetters}`,
    `$JS.API.STREAM.CREATE.${deadLetters}`,
    `$JS.API.CONSUMER.UPDATE.${stream}.>`,
    `$JS.API.CONSUMER.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.INFO.${stream}.>`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.>`,
    `$JS.ACK.${stream}.>`,
  ];
  return {
    publish: {
      allow: [
        ...[...calls].sort().map((path) => subjectForPath(`/${path}`, subjectPrefix)),
        // The gateway runs no service: it reads events (live views) but has no outbox to relay and
        // no durable consumer whose failures it would copy to the dead letters.
        ...(user === "gateway" ? [] : [prefixed(subjectPrefix, "events.>"), prefixed(subjectPrefix, "deadletter.>")]),
        ...(user === "identity" ? [prefixed(subjectPrefix, "broadcast.>")] : []),
        ...(user === "intake"
          ? [CUSTOM_SOURCE_CHANGED, GROUPING_OVERRIDES_CHANGED, CORRELATION_CHANGED].map((notice) => prefixed(subjectPrefix, `broadcast.${notice}`))
          : []),
        ...(user === "subscriptions" ? [prefixed(subjectPrefix, `broadcast.${SUBSCRIPTION_CREATED}`)] : []),
        ...(user === "remotesource" ? [prefixed(subjectPrefix, `broadcast.${REMOTE_SOURCE_CHANGED}`)] : []),
        ...jetstream,
      ],
    },
    subscribe: {
      allow: [...(served ? [prefixed(subjectPrefix, `rpc.${served}.>`)] : []), `${inboxPrefix(subjectPrefix, user)}.>`, prefixed(subjectPrefix, "broadcast.>")],
    },
    // Answers go to the requester's reply subject, whatever its name.
    allow_responses: true,
  };
}

/**
 * A nats-server `authorization` block with one user per service. `password` gives each user's
 * password as it should appear in the file: a literal (quoted) or a `$VARIABLE` nats-server reads
 * from its environment.
 */
export function natsAuthorizationBlock(password: (user: NatsUser) => string, subjectPrefix = ""): string {
  const users = NATS_USERS.map((user) => {
    const p = natsPermissions(user, subjectPrefix);
    const list = (items: string[]) => `[\n${items.map((i) => `          ${JSON.stringify(i)}`).join("\n")}\n        ]`;
    return [
      `    {`,
      `      user: ${JSON.stringify(user)}`,
      `      password: ${password(user)}`,
      `      permissions: {`,
      `        publish: { allow: ${list(p.publish.allow)} }`,
      `        subscribe: { allow: ${list(p.subscribe.allow)} }`,
      `        allow_responses: ${p.allow_responses}`,
      `      }`,
      `    }`,
    ].join("\n");
  });
  return `authorization {\n  users: [\n${users.join("\n")}\n  ]\n}\n`;
}

import type { Message as ProtoMessage } from "@bufbuild/protobuf";
import type { Message as MessageShape, MessageJson } from "../../../../gen/warroom/comms/v1/comms_pb";
import type {
  Heartbeat as HeartbeatShape,
  HeartbeatJson,
  PingRecord as PingRecordShape,
  PingRecordJson,
} from "../../../../gen/warroom/heartbeats/v1/heartbeats_pb";
import type { ApiKey as ApiKeyShape, ApiKeyJson, Member as MemberShape, MemberJson } from "../../../../gen/warroom/identity/v1/identity_pb";
import type {
  Entity as EntityShape,
  EntityJson,
  EscalationPolicy as EscalationPolicyShape,
  EscalationPolicyJson,
  Incident as IncidentShape,
  IncidentJson,
  MaintenanceWindow as MaintenanceWindowShape,
  MaintenanceWindowJson,
  TimelineEntry as TimelineEntryShape,
  TimelineEntryJson,
} from "../../../../gen/warroom/incidents/v1/incidents_pb";
import type {
  ConformanceReport as ConformanceReportShape,
  ConformanceReportJson,
  RemoteSource as RemoteSourceShape,
  RemoteSourceJson,
} from "../../../../gen/warroom/remotesource/v1/remotesource_pb";
import type {
  Delivery as DeliveryShape,
  DeliveryJson,
  Subscription as SubscriptionShape,
  SubscriptionJson,
} from "../../../../gen/warroom/subscriptions/v1/subscriptions_pb";

// The console speaks the same public REST API as every other client: JSON over fetch, with the
// session token from login as `Authorization: Bearer`. The token lives in sessionStorage: it is
// gone when the tab closes and is never sent anywhere but this origin's API.

export interface Session {
  token: string;
  org: string;
  email: string;
}

const SESSION_KEY = "warroom.session";
const sessionListeners = new Set<() => void>();

/**
 * The signed-in session kept in this tab's session storage, or null when there is none or it is
 * malformed.
 */
export function loadSession(): Session | null {
  try {
    const raw = sessionStorage.getItem(SESSION_KEY);
    if (!raw) return null;
    const value = JSON.parse(raw) as Partial<Session>;
    if (typeof value.token !== "string" || typeof value.org !== "string") return null;
    return { token: value.token, org: value.org, email: typeof value.email === "string" ? value.email : "" };
  } catch {
    return null;
  }
}

/** Keeps the session in this tab's session storage and tells every listener. */
export function saveSession(session: Session): void {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(session));
  for (const listener of sessionListeners) listener();
}

/** Why the last session ended, shown on the sign-in page once. */
let endedReason = "";

/** Forgets the session, with the reason the sign-in page shows, and tells every listener. */
export function clearSession(reason = ""): void {
  endedReason = reason;
  sessionStorage.removeItem(SESSION_KEY);
  for (const listener of sessionListeners) listener();
}

/** Why the last session ended, once: the next call answers "". */
export function takeEndedReason(): string {
  const reason = endedReason;
  endedReason = "";
  return reason;
}

/**
 * Calls `listener` whenever the session is saved or cleared; returns the function that stops it.
 */
export function onSessionChange(listener: () => void): () => void {
  sessionListeners.add(listener);
  return () => sessionListeners.delete(listener);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** `/o/<org><path>` for the signed-in organization. */
export function orgPath(path: string): string {
  const session = loadSession();
  if (!session) throw new ApiError(401, "not signed in");
  return `/o/${encodeURIComponent(session.org)}${path}`;
}

/** One call to the REST API: JSON in, JSON out, `{error}` answers thrown as ApiError. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const session = loadSession();
  const headers: Record<string, string> = { accept: "application/json" };
  if (session) headers.authorization = `Bearer ${session.token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  } catch {
    throw new ApiError(0, "The service cannot be reached. Check your connection and try again.");
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: unknown = null;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  if (!res.ok) {
    const message = (json as { error?: unknown } | null)?.error;
    if (res.status === 401 && session && path !== "/auth/login") clearSession("Your session has ended. Sign in again.");
    throw new ApiError(res.status, typeof message === "string" ? message : `The service answered ${res.status}.`);
  }
  return json as T;
}

/** The message of a failed call or any thrown value, to show to a person. */
export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return String(err);
}

// Shapes of the public API, from the schema: each is the generated proto3 JSON type of the message
// as the REST routes send it.

/**
 * A message as the REST routes answer it (`gateway/http-json.ts`): its proto3 JSON (`XxxJson`,
 * camelCase), with every field present, and an optional or message field that is unset written as
 * null. `Shape` (the generated message type) says which fields those are.
 */
type Rest<Shape, Json> = { [K in keyof Json & keyof Shape]-?: RestField<Shape[K], Exclude<Json[K], undefined>> };
type RestField<S, J> = undefined extends S ? RestValue<Exclude<S, undefined>, J> | null : RestValue<S, J>;
type RestValue<S, J> = S extends readonly (infer SItem)[]
  ? J extends readonly (infer JItem)[]
    ? RestValue<SItem, JItem>[]
    : J
  : S extends ProtoMessage
    ? J extends string // a well-known type written as a string, e.g. a Timestamp
      ? J
      : Rest<S, J>
    : S extends number // a double is written as a number: the service sends finite values only
      ? Exclude<J, "NaN" | "Infinity" | "-Infinity">
      : J;

export type Entity = Rest<EntityShape, EntityJson>;
export type TimelineEntry = Rest<TimelineEntryShape, TimelineEntryJson>;
export type Incident = Rest<IncidentShape, IncidentJson>;
export type CommsMessage = Rest<MessageShape, MessageJson>;
export type Heartbeat = Rest<HeartbeatShape, HeartbeatJson>;
export type PingRecord = Rest<PingRecordShape, PingRecordJson>;
export type RemoteSource = Rest<RemoteSourceShape, RemoteSourceJson>;
export type ConformanceReport = Rest<ConformanceReportShape, ConformanceReportJson>;
export type MaintenanceWindow = Rest<MaintenanceWindowShape, MaintenanceWindowJson>;
export type EscalationPolicy = Rest<EscalationPolicyShape, EscalationPolicyJson>;
export type Member = Rest<MemberShape, MemberJson>;
export type ApiKey = Rest<ApiKeyShape, ApiKeyJson>;
export type Subscription = Rest<SubscriptionShape, SubscriptionJson>;
export type Delivery = Rest<DeliveryShape, DeliveryJson>;

/** The source badges an incident can carry, and the severities a person may set. */
export { SEVERITIES, SOURCE_BADGES } from "../../../domain/vocabulary";

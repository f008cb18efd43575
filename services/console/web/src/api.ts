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

export function saveSession(session: Session): void {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(session));
  for (const listener of sessionListeners) listener();
}

/** Why the last session ended, shown on the sign-in page once. */
let endedReason = "";

export function clearSession(reason = ""): void {
  endedReason = reason;
  sessionStorage.removeItem(SESSION_KEY);
  for (const listener of sessionListeners) listener();
}

export function takeEndedReason(): string {
  const reason = endedReason;
  endedReason = "";
  return reason;
}

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

export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return String(err);
}

// Shapes of the public API (proto3 JSON: camelCase, unset optional fields as null).

export interface Entity {
  kind: string;
  id: string;
}

export interface TimelineEntry {
  kind: string;
  at: string;
  summary: string | null;
  link: string | null;
  alertRef: string | null;
  eventId: string | null;
  data: Record<string, unknown> | null;
}

export interface Incident {
  id: string;
  title: string;
  severity: string;
  state: string;
  source: string;
  entity: Entity | null;
  workspaceUrl: string;
  openedAt: string;
  timeline: TimelineEntry[];
  /** Set when the timeline has more entries than this first page: GET .../timeline?cursor= reads on. */
  timelineNextCursor?: string | null;
  resolvedAt: string | null;
  archivedAt: string | null;
  runbookUrl: string | null;
}

export interface CommsMessage {
  messageId: string;
  version: string;
  channel: string;
  body: string;
  state: string;
  error: string | null;
}

export interface Heartbeat {
  name: string;
  expectedIntervalSeconds: number;
  graceSeconds: number;
  lastSeenAt: string | null;
  createdAt: string;
  dueAt: string;
  status: string;
  schedule: string | null;
  timezone: string | null;
  maxRunSeconds: number | null;
  nextExpectedAt: string;
  lastPing: { at: string; kind: string; exitStatus: number | null; runSeconds: number | null; body: string; bodyCut: boolean; bodyBytes: number } | null;
  runningSince: string | null;
}

export interface PingRecord {
  at: string;
  kind: string;
  runSeconds: number | null;
  exitStatus: number | null;
  clientAddress: string;
  bodyBytes: number;
  runId: string | null;
}

export interface RemoteSource {
  id: string;
  name: string;
  baseUrl: string;
  transport: string;
  tenantRef: string;
  status: string;
  lastError: string | null;
  lastTestedAt: string | null;
}

export interface ConformanceReport {
  ok: boolean;
  protocolVersion: string;
  checks: { name: string; ok: boolean; detail: string }[];
}

export interface MaintenanceWindow {
  id: string;
  startsAt: string;
  endsAt: string;
  reason: string;
  match: { sources: string[]; entities: Entity[] } | null;
}

/** The source badges an incident can carry. */
export const SOURCE_BADGES = [
  "metrics-monitor",
  "cloud-monitor",
  "log-analytics",
  "error-tracker",
  "remote",
  "alert-router",
  "chat",
  "heartbeat",
] as const;

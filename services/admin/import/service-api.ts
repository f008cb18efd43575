/**
 * How the importers talk to a running service: its HTTP API at `--url` (default `WARROOM_URL`,
 * else http://localhost:8080), as the admin whose session token or personal API key is in
 * `WARROOM_TOKEN` (never on the command line, where other users of the machine can read it).
 */

export const DEFAULT_URL = "http://localhost:8080";

export interface Answer<T = Record<string, unknown>> {
  status: number;
  body: (T & { error?: string }) | null;
}

/** The service could not be reached, or refused the token: nothing more can be done. */
export class ServiceError extends Error {
  override name = "ServiceError";
}

export interface ServiceApi {
  /** `https://host/o/{org}`, the organization's routes. */
  readonly org: string;
  readonly base: string;
  call<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<Answer<T>>;
}

export function baseUrlOf(url: string | undefined): string {
  return (url ?? process.env.WARROOM_URL ?? DEFAULT_URL).replace(/\/+$/, "");
}

/**
 * A client of the organization's routes. An unreachable service, and a token it refuses (401) or
 * that is not an admin's (403), throw ServiceError saying what to do.
 */
export function serviceApi(baseUrl: string, orgSlug: string, token: string): ServiceApi {
  const base = baseUrl.replace(/\/+$/, "");
  const org = `${base}/o/${encodeURIComponent(orgSlug)}`;
  return {
    org,
    base,
    async call<T>(method: string, path: string, body?: unknown): Promise<Answer<T>> {
      const url = `${org}${path}`;
      let res: Response;
      try {
        res = await fetch(url, {
          method,
          headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(30_000),
        });
      } catch (err) {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        throw new ServiceError(
          `cannot reach the service at ${base} (${cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err))}): start it, or give its address with --url or WARROOM_URL`,
        );
      }
      const text = await res.text();
      let parsed: Answer<T>["body"] = null;
      try {
        parsed = text ? JSON.parse(text) : null;
      } catch {
        parsed = { error: text.slice(0, 500) } as Answer<T>["body"];
      }
      if (res.status === 401) {
        throw new ServiceError(
          `the service at ${base} refused the token in WARROOM_TOKEN (401 ${parsed?.error ?? ""}): give a current session token or personal API key of an admin of ${orgSlug}`,
        );
      }
      if (res.status === 403) {
        throw new ServiceError(
          `the token in WARROOM_TOKEN may not change ${orgSlug} (403 ${parsed?.error ?? ""}): use the key of an admin or owner of that organization`,
        );
      }
      return { status: res.status, body: parsed };
    },
  };
}

/** The token from WARROOM_TOKEN, or the reason there is none. */
export function tokenFromEnvironment(): string | undefined {
  const token = process.env.WARROOM_TOKEN ?? "";
  return token === "" ? undefined : token;
}

export const NO_TOKEN = "WARROOM_TOKEN is not set: a session token or personal API key of an admin of the organization";

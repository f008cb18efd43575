import { readFileSync } from "node:fs";
import { credsAuthenticator, nkeyAuthenticator, tokenAuthenticator, usernamePasswordAuthenticator, type ConnectionOptions } from "@nats-io/nats-core";

/** The NATS settings of the configuration (see config.ts). */
export interface NatsSettings {
  NATS_URL?: string;
  NATS_USER?: string;
  NATS_PASSWORD?: string;
  NATS_TOKEN?: string;
  NATS_NKEY_SEED?: string;
  NATS_CREDS_FILE?: string;
  NATS_TLS_CA_FILE?: string;
  NATS_TLS_CERT_FILE?: string;
  NATS_TLS_KEY_FILE?: string;
  NATS_SUBJECT_PREFIX: string;
}

/** What is wrong with the NATS credentials of a configuration, or undefined. */
export function natsCredentialProblem(s: Omit<NatsSettings, "NATS_SUBJECT_PREFIX">): string | undefined {
  const kinds = [
    s.NATS_USER || s.NATS_PASSWORD ? "NATS_USER/NATS_PASSWORD" : "",
    s.NATS_TOKEN ? "NATS_TOKEN" : "",
    s.NATS_NKEY_SEED ? "NATS_NKEY_SEED" : "",
    s.NATS_CREDS_FILE ? "NATS_CREDS_FILE" : "",
  ].filter(Boolean);
  if (kinds.length > 1) return `set one kind of NATS credential, not ${kinds.join(" and ")}`;
  if (Boolean(s.NATS_USER) !== Boolean(s.NATS_PASSWORD)) return "NATS_USER and NATS_PASSWORD must be set together";
  if (Boolean(s.NATS_TLS_CERT_FILE) !== Boolean(s.NATS_TLS_KEY_FILE)) return "NATS_TLS_CERT_FILE and NATS_TLS_KEY_FILE must be set together";
  if (s.NATS_NKEY_SEED && !/^SU[A-Z2-7]{56}$/.test(s.NATS_NKEY_SEED)) return "NATS_NKEY_SEED must be a user NKEY seed (SU...)";
  return undefined;
}

/**
 * Connection options for the process's NATS connection: credentials, TLS with a custom CA, and an
 * inbox prefix of the connection's own user, so that a server can let each user read only the
 * replies to its own requests (`_INBOX_<name>.>`).
 */
export function natsConnectionOptions(settings: NatsSettings, name: string): ConnectionOptions {
  const options: ConnectionOptions = {
    servers: settings.NATS_URL,
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // No stack trace captured in advance for every request and JetStream publish (two Error
    // objects each): errors keep their types and messages, only the caller's async stack goes.
    noAsyncTraces: true,
    inboxPrefix: inboxPrefix(settings.NATS_SUBJECT_PREFIX, name),
  };
  if (settings.NATS_USER) options.authenticator = usernamePasswordAuthenticator(settings.NATS_USER, settings.NATS_PASSWORD);
  else if (settings.NATS_TOKEN) options.authenticator = tokenAuthenticator(settings.NATS_TOKEN);
  else if (settings.NATS_NKEY_SEED) options.authenticator = nkeyAuthenticator(new TextEncoder().encode(settings.NATS_NKEY_SEED));
  else if (settings.NATS_CREDS_FILE) {
    const file = settings.NATS_CREDS_FILE;
    // Read at every (re)connect, so a rotated file is picked up.
    options.authenticator = credsAuthenticator(() => readFileSync(file));
  }
  if (settings.NATS_TLS_CA_FILE || settings.NATS_TLS_CERT_FILE) {
    options.tls = {
      ...(settings.NATS_TLS_CA_FILE ? { caFile: settings.NATS_TLS_CA_FILE } : {}),
      ...(settings.NATS_TLS_CERT_FILE ? { certFile: settings.NATS_TLS_CERT_FILE, keyFile: settings.NATS_TLS_KEY_FILE } : {}),
    };
  }
  return options;
}

/** `_INBOX_<process name>`, after the installation's prefix when there is one. */
export function inboxPrefix(subjectPrefix: string, name: string): string {
  const own = `_INBOX_${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  return subjectPrefix ? `${subjectPrefix}.${own}` : own;
}

/** A subject of the installation: `<prefix>.<subject>`, or the subject itself without a prefix. */
export function prefixed(subjectPrefix: string, subject: string): string {
  return subjectPrefix ? `${subjectPrefix}.${subject}` : subject;
}

/** The JetStream stream of the installation's dead-letter copies. */
export function deadLetterStreamName(subjectPrefix: string): string {
  return subjectPrefix ? `${subjectPrefix.replace(/[^A-Za-z0-9_-]/g, "_")}_EVENTS_DEAD_LETTERS` : "EVENTS_DEAD_LETTERS";
}

/** The JetStream stream of the installation's domain events. */
export function eventsStreamName(subjectPrefix: string): string {
  return subjectPrefix ? `${subjectPrefix.replace(/[^A-Za-z0-9_-]/g, "_")}_EVENTS` : "EVENTS";
}

const prefixes = new WeakMap<object, string>();

/** Records the subject prefix a connection's subjects carry; set once, right after connecting. */
export function setSubjectPrefix(nc: object, subjectPrefix: string): void {
  prefixes.set(nc, subjectPrefix);
}

const inboxes = new WeakMap<object, string>();

/** Records the inbox prefix a connection was opened with (see natsConnectionOptions). */
export function setInboxPrefix(nc: object, prefix: string | undefined): void {
  if (prefix) inboxes.set(nc, prefix);
}

/** The inbox prefix of a connection, or undefined for the default `_INBOX`. */
export function inboxPrefixOf(nc: object): string | undefined {
  return inboxes.get(nc);
}

/** The subject prefix of a connection ("" when none was set). */
export function subjectPrefixOf(nc: object): string {
  return prefixes.get(nc) ?? "";
}

/**
 * Why a connection must not be used: the server accepted it without asking for credentials, so
 * anyone who reaches it can call every internal method. Undefined when the server requires
 * authentication, or when the operator allowed an open server (NATS_ALLOW_UNAUTHENTICATED=true).
 */
export function unauthenticatedNatsProblem(info: { auth_required?: boolean } | undefined, allowUnauthenticated: boolean): string | undefined {
  if (info?.auth_required === true || allowUnauthenticated) return undefined;
  return "the NATS server accepted this process without credentials, so anyone who reaches it can call every internal method; give NATS users and passwords (npm run nats-config, docs/SECURITY.md), or set NATS_ALLOW_UNAUTHENTICATED=true for development only";
}

/** The NATS server release the service is built and documented for. */
export const NATS_SUPPORTED_VERSION = "2.10.0";
/**
 * The oldest release with every JetStream feature the event bus uses: the consumers API it reads
 * with (`consume()` on a named pull consumer, 2.9.4), on top of the named-consumer create subject
 * (2.9.0) the NATS permissions allow, naks with a delay and ephemeral consumers that expire.
 */
export const NATS_REQUIRED_VERSION = "2.9.4";

type Version = [major: number, minor: number, patch: number, prerelease: boolean];

function parseVersion(version: string): Version | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/.exec(version.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3]), m[4] !== undefined] : undefined;
}

/** Whether `a` is older than `b`; a prerelease is older than its release (2.10.0-beta.1 < 2.10.0). */
function olderThan(a: Version, b: Version): boolean {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return (a[i] as number) < (b[i] as number);
  return a[3] && !b[3];
}

/**
 * What to do about the version a NATS server announced in its INFO: refuse to start when the server
 * lacks a JetStream feature the service needs (older than NATS_REQUIRED_VERSION), warn when it runs
 * but is older than the supported release (a 2.9 from 2.9.4 on, or a 2.10 prerelease) or announces
 * a version that cannot be read; undefined for a supported release.
 */
export function natsServerVersionProblem(version: string | undefined): { refuse: boolean; message: string } | undefined {
  const seen = parseVersion(version ?? "");
  const upgrade = `upgrade NATS to ${NATS_SUPPORTED_VERSION} or later`;
  if (!seen)
    return {
      refuse: false,
      message: `the NATS server announced the version ${JSON.stringify(version ?? "")}, which is not a release number: the service needs ${NATS_SUPPORTED_VERSION} or later and cannot check it; make sure it is one`,
    };
  if (olderThan(seen, parseVersion(NATS_REQUIRED_VERSION)!))
    return {
      refuse: true,
      message: `the NATS server is version ${version}, older than ${NATS_REQUIRED_VERSION}: it lacks the JetStream consumer API the event bus reads with; ${upgrade}`,
    };
  if (olderThan(seen, parseVersion(NATS_SUPPORTED_VERSION)!))
    return {
      refuse: false,
      message: `the NATS server is version ${version}, older than the supported ${NATS_SUPPORTED_VERSION}: the features the service uses are there (from ${NATS_REQUIRED_VERSION}), but ${upgrade}`,
    };
  return undefined;
}

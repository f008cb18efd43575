import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { RemoteSourceSchema, type RemoteSource, type RemoteSourceAuth } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { ConfigError, type Config } from "../runtime/config/config.js";
import { createAddressPolicy, isEgressError, type AddressPolicy } from "../runtime/egress/index.js";
import { isUuid } from "../runtime/ids.js";
import { InvalidArgumentError, NotFoundError, UnavailableError } from "../runtime/errors.js";
import { SecretBoxError } from "../runtime/credentials/secret-box.js";
import { REMOTE_SOURCE_CHANGED } from "../runtime/transport/broadcast.js";
import { createSourceClient, type SourceClient, type SourceCredentials, type SourceTransport } from "../remotesource-kit/client/source-client.js";
import type { RemoteSourceDeps } from "./deps.js";
import type { ConnectionRow } from "./store.js";
import { storedReads, toInvestigationRead } from "./stored-reads.js";

export const AUDIT_KINDS = {
  created: "remote_source.created",
  updated: "remote_source.updated",
  deleted: "remote_source.deleted",
  tested: "remote_source.tested",
} as const;

const NAME_MAX = 100;
const URL_MAX = 2048;
const TENANT_MAX = 200;
const TOKEN_MAX = 4096;
const PEM_MAX = 64 * 1024;

/**
 * The remote-source address policy: public addresses only, unless REMOTE_SOURCE_ALLOW_CIDRS names
 * the range (an in-cluster or on-premises source's private network, a loopback test source): any
 * admin may save a connection, and a private range open by default would let one aim reads at the
 * installation's internal services. REMOTE_SOURCE_DENY_CIDRS refuses ranges outright (the chat
 * webhook's EGRESS_ALLOW_PRIVATE_CIDRS does not apply here).
 */
export function remoteSourcePolicy(config: Config): AddressPolicy {
  try {
    return createAddressPolicy({
      allowPrivateCidrs: config.REMOTE_SOURCE_ALLOW_CIDRS,
      denyCidrs: config.REMOTE_SOURCE_DENY_CIDRS,
      requireHttps: false,
      settings: { allow: "REMOTE_SOURCE_ALLOW_CIDRS", deny: "REMOTE_SOURCE_DENY_CIDRS" },
    });
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  REMOTE_SOURCE_DENY_CIDRS or REMOTE_SOURCE_ALLOW_CIDRS: ${(err as Error).message}`);
  }
}

/**
 * The PEM of EGRESS_CA_FILE, or undefined when unset; an unreadable file is a configuration error.
 */
export function readEgressCa(config: Config): Buffer | undefined {
  if (!config.EGRESS_CA_FILE) return undefined;
  try {
    return readFileSync(config.EGRESS_CA_FILE);
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  EGRESS_CA_FILE: cannot read the file (${(err as NodeJS.ErrnoException).code ?? "error"})`);
  }
}

/** A connection row as the API answers it, never with its credential. */
export function toRemoteSource(row: ConnectionRow): RemoteSource {
  return create(RemoteSourceSchema, {
    id: row.id,
    name: row.name,
    baseUrl: row.base_url,
    transport: row.transport,
    tenantRef: row.tenant_ref,
    status: row.status,
    ...(row.last_error === null ? {} : { lastError: row.last_error }),
    ...(row.last_tested_at === null ? {} : { lastTestedAt: timestampFromDate(row.last_tested_at) }),
    investigationReads: storedReads(row).map(toInvestigationRead),
  });
}

/** The connection name, trimmed; empty or too long is InvalidArgument. */
export function validateName(raw: string): string {
  const name = raw.trim();
  if (!name) throw new InvalidArgumentError("name required");
  if (name.length > NAME_MAX) throw new InvalidArgumentError(`name must be at most ${NAME_MAX} characters`);
  return name;
}

/** The transport, `http` (the default) or `grpc`; anything else is InvalidArgument. */
export function validateTransport(raw: string): SourceTransport {
  const transport = raw.trim() || "http";
  if (transport !== "http" && transport !== "grpc") throw new InvalidArgumentError("transport must be http or grpc");
  return transport;
}

/**
 * The tenant reference, trimmed; empty, too long or the organization's own id is InvalidArgument.
 */
export function validateTenantRef(raw: string, orgId: string): string {
  const tenantRef = raw.trim();
  if (!tenantRef) throw new InvalidArgumentError("tenantRef required");
  if (tenantRef.length > TENANT_MAX) throw new InvalidArgumentError(`tenantRef must be at most ${TENANT_MAX} characters`);
  // Spec: the tenant is an opaque per-connection reference, never an organization id.
  if (tenantRef === orgId) throw new InvalidArgumentError("tenantRef must not be the organization id");
  return tenantRef;
}

/** An http(s) base URL without credentials, query or fragment, and not in a refused range. */
export function validateBaseUrl(policy: AddressPolicy, raw: string): string {
  const baseUrl = raw.trim().replace(/\/+$/, "");
  if (!baseUrl) throw new InvalidArgumentError("baseUrl required");
  if (baseUrl.length > URL_MAX) throw new InvalidArgumentError(`baseUrl must be at most ${URL_MAX} characters`);
  try {
    const checked = policy.checkUrl(baseUrl);
    if (checked.url.search || checked.url.hash) throw new InvalidArgumentError("baseUrl must not have a query or a fragment");
  } catch (err) {
    if (isEgressError(err)) throw new InvalidArgumentError(`baseUrl refused: ${err.message}`);
    throw err;
  }
  return baseUrl;
}

/**
 * The credential a connection presents: a bearer token, a client certificate with its key, or
 * both. A source's health fails closed, so a connection without one could never pass its test.
 */
/**
 * A bearer token is a password: over plain http anyone on the path reads it. It goes to an http
 * baseUrl only when an operator names the host in REMOTE_SOURCE_HTTP_BEARER_HOSTS.
 */
export function requireSafeBearerTransport(httpBearerHosts: readonly string[], baseUrl: string, bearerToken: string | undefined): void {
  if (!bearerToken || baseUrl.startsWith("https:")) return;
  const host = new URL(baseUrl).hostname.toLowerCase();
  if (httpBearerHosts.includes(host)) return;
  throw new InvalidArgumentError(
    `a bearer token is sent only over https; use an https baseUrl (an operator may allow ${host} with REMOTE_SOURCE_HTTP_BEARER_HOSTS)`,
  );
}

/**
 * The credential to save: a bearer token, a client certificate with its key, or both, and an
 * optional CA; each checked, and refused where the base URL would carry it in clear.
 */
export function validateCredentials(auth: RemoteSourceAuth | undefined, baseUrl: string, httpBearerHosts: readonly string[] = []): SourceCredentials {
  const bearerToken = auth?.bearerToken?.trim() || undefined;
  const clientCertPem = auth?.clientCertPem?.trim() || undefined;
  const clientKeyPem = auth?.clientKeyPem?.trim() || undefined;
  const caPem = auth?.caPem?.trim() || undefined;
  if (!bearerToken && !clientCertPem && !clientKeyPem) {
    throw new InvalidArgumentError("auth required: a bearerToken, or a clientCertPem with its clientKeyPem");
  }
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this check refuses.
  if (bearerToken && (bearerToken.length > TOKEN_MAX || /[\s\u0000-\u001f\u007f]/.test(bearerToken))) {
    throw new InvalidArgumentError(`auth.bearerToken must be at most ${TOKEN_MAX} characters without spaces or control characters`);
  }
  if (Boolean(clientCertPem) !== Boolean(clientKeyPem)) throw new InvalidArgumentError("auth.clientCertPem and auth.clientKeyPem go together");
  const https = baseUrl.startsWith("https:");
  if ((clientCertPem || caPem) && !https) throw new InvalidArgumentError("a client certificate or CA needs an https baseUrl");
  requireSafeBearerTransport(httpBearerHosts, baseUrl, bearerToken);
  for (const [field, pem] of [
    ["clientCertPem", clientCertPem],
    ["clientKeyPem", clientKeyPem],
    ["caPem", caPem],
  ] as const) {
    if (pem && pem.length > PEM_MAX) throw new InvalidArgumentError(`auth.${field} must be at most ${PEM_MAX} characters`);
  }
  try {
    if (clientCertPem) new X509Certificate(clientCertPem);
  } catch {
    throw new InvalidArgumentError("auth.clientCertPem is not a PEM certificate");
  }
  try {
    if (clientKeyPem) createPrivateKey(clientKeyPem);
  } catch {
    throw new InvalidArgumentError("auth.clientKeyPem is not a PEM private key (an encrypted key is not supported)");
  }
  try {
    if (caPem) new X509Certificate(caPem);
  } catch {
    throw new InvalidArgumentError("auth.caPem is not a PEM certificate");
  }
  return { bearerToken, clientCertPem, clientKeyPem, caPem };
}

/** Binds a ciphertext to its row: copied into another connection or organization, it does not open. */
function associatedData(orgId: string, id: string): string {
  return `remotesource.connections:${orgId}:${id}`;
}

/** Seals the credential for the connection's row, bound to its organization and id. */
export function sealCredentials(deps: RemoteSourceDeps, orgId: string, id: string, credentials: SourceCredentials): { keyId: string; ciphertext: Buffer } {
  return deps.secretBox().seal(JSON.stringify(credentials), associatedData(orgId, id));
}

/**
 * Opens the connection's credential; one that cannot be decrypted (key gone or replaced) is
 * Unavailable, saying to update its auth.
 */
export function openCredentials(deps: RemoteSourceDeps, row: ConnectionRow): SourceCredentials {
  try {
    return JSON.parse(
      deps.secretBox().open({ keyId: row.key_id, ciphertext: row.credential_ciphertext }, associatedData(row.org_id, row.id)),
    ) as SourceCredentials;
  } catch (err) {
    if (err instanceof SecretBoxError) {
      deps.logger.error({ connectionId: row.id, keyId: row.key_id, reason: err.message }, "remote-source credential cannot be decrypted");
      throw new UnavailableError(`the connection's credential cannot be decrypted (${err.message}); update its auth`);
    }
    throw err;
  }
}

/** The organization's connection with this id; NotFound when there is none. */
export async function loadConnection(deps: RemoteSourceDeps, orgId: string, id: string): Promise<ConnectionRow> {
  if (!isUuid(id)) throw new NotFoundError("no such remote source");
  const [row] = await deps.sql<ConnectionRow[]>`select * from remotesource.connections where org_id = ${orgId} and id = ${id}`;
  if (!row) throw new NotFoundError("no such remote source");
  return row;
}

/**
 * A source client for the connection, with its credential opened and the bearer-over-http rule
 * checked again.
 */
export function clientFor(deps: RemoteSourceDeps, row: ConnectionRow, options: { keepAliveMs?: number } = {}): SourceClient {
  const credentials = openCredentials(deps, row);
  // Checked at every call too: a connection saved before the rule, or before the host was
  // removed from the list, does not send its token in clear.
  requireSafeBearerTransport(deps.httpBearerHosts, row.base_url, credentials.bearerToken);
  return createSourceClient(
    { baseUrl: row.base_url, transport: row.transport, tenantRef: row.tenant_ref, credentials },
    { policy: deps.policy, ...(deps.ca ? { ca: deps.ca } : {}), ...(options.keepAliveMs ? { keepAliveMs: options.keepAliveMs } : {}) },
  );
}

/**
 * Records a test's or a read's verdict, unless the connection changed since it was loaded: a
 * verdict on an old credential must not stick to a new one.
 */
export async function recordStatus(
  deps: RemoteSourceDeps,
  row: ConnectionRow,
  status: ConnectionRow["status"],
  lastError: string | null,
  options: { tested: boolean },
): Promise<ConnectionRow> {
  const [updated] = await deps.sql<ConnectionRow[]>`
    update remotesource.connections
    set status = ${status}, last_error = ${lastError},
        last_tested_at = case when ${options.tested} then now() else last_tested_at end
    where id = ${row.id} and org_id = ${row.org_id} and revision = ${row.revision}
    returning *`;
  return updated ?? row;
}

/**
 * Tells every replica, before the change is answered, that the organization's connections changed:
 * each drops its cached answer to "does this organization have an investigation read", so the
 * incident that opens after the answer is investigated as the change says (investigation.ts).
 */
export async function connectionsChanged(deps: Pick<RemoteSourceDeps, "broadcast">, orgId: string): Promise<void> {
  await deps.broadcast.publish(REMOTE_SOURCE_CHANGED, orgId);
}

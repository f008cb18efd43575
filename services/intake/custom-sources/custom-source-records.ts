import { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type CustomSource, type CustomSourceRule, CustomSourceRuleSchema, CustomSourceSchema } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { SOURCE_BADGES } from "../../domain/vocabulary.js";
import { FailedPreconditionError, InvalidArgumentError, UnprocessablePayloadError } from "../../runtime/errors.js";
import type { SecretBox } from "../../runtime/credentials/secret-box.js";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "../request-body.js";
import { type CompiledRules, compileRules } from "../../cel/cel-mapping.js";
import { authOptionsOf, type SourceAuth } from "./source-auth.js";
import type { CustomSourceRow, RuleJson } from "./store.js";

/** A grouping override's attach-key expression as a one-rule rule set, so it runs under the same checks and budget. */
export function compileAttachKey(expression: string): CompiledRules {
  return compileRules([create(CustomSourceRuleSchema, { name: "grouping", title: "'grouping'", attachKey: expression })]);
}

/** A custom source's name is its badge: the characters of a badge, never a built-in one's. */
export function validateName(raw: string): string {
  const name = raw.trim();
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name)) {
    throw new InvalidArgumentError("name: 1 to 63 lowercase letters, digits and hyphens, starting with a letter or digit (it is the incidents' badge)");
  }
  if ((SOURCE_BADGES as readonly string[]).includes(name) || name === "custom") {
    throw new InvalidArgumentError(`name: ${JSON.stringify(name)} is the badge of a built-in source; choose another`);
  }
  return name;
}

/** The most a description holds: room for an imported tool's templates, word for word. */
export const MAX_DESCRIPTION_CHARACTERS = 16_384;

/** A description as kept; refused beyond its bound, or holding a NUL (Postgres text cannot). */
export function validateDescription(raw: string): string {
  if (raw.length > MAX_DESCRIPTION_CHARACTERS) {
    throw new InvalidArgumentError(`description: at most ${MAX_DESCRIPTION_CHARACTERS} characters (got ${raw.length})`);
  }
  if (raw.includes("\u0000")) throw new InvalidArgumentError("description: must not contain a NUL character");
  return raw;
}

export function rulesToJson(rules: readonly CustomSourceRule[]): RuleJson[] {
  return rules.map((rule) => toJson(CustomSourceRuleSchema, rule) as RuleJson);
}

export function rulesFromJson(rules: readonly RuleJson[]): CustomSourceRule[] {
  return rules.map((rule) => fromJson(CustomSourceRuleSchema, rule as JsonObject, { ignoreUnknownFields: true }));
}

/** Where a source's sealed secret belongs: a sealed value copied into another source's row does not open. */
export function sealedSecretPlace(sourceId: string): string {
  return `custom-source-secret:${sourceId}`;
}

/**
 * A secret's sealed copy, for checking signatures with. Sealed whenever this process has keys, so
 * a source can take up a signature later; without keys (separate processes without SECRETS_KEYS)
 * only a source that checks signatures needs one, and is refused with what to set.
 */
export function sealSourceSecret(
  box: (() => SecretBox) | undefined,
  sourceId: string,
  secret: string,
  signed: boolean,
): { sealed: Buffer | null; sealedBy: string | null } {
  try {
    if (!box) throw new Error("this process has no keys for secrets at rest");
    const sealed = box().seal(secret, sealedSecretPlace(sourceId));
    return { sealed: sealed.ciphertext, sealedBy: sealed.keyId };
  } catch (err) {
    if (!signed) return { sealed: null, sealedBy: null };
    throw new FailedPreconditionError(`a source that checks signatures keeps its secret sealed, and this intake cannot seal it: ${(err as Error).message}`);
  }
}

/** The refusal of a signature for a source whose secret is kept only as a hash. */
export function unsealedForSignature(): FailedPreconditionError {
  return new FailedPreconditionError(
    "this source's secret is kept only as a hash, so a signature cannot be checked with it: rotate the credential (POST .../credential, " +
      "with the sender's secret if it makes its own), then set the signature",
  );
}

/** A row's auth options. */
export function authOfRow(row: CustomSourceRow): SourceAuth {
  return { secretInPath: row.secret_in_path, basicAuth: row.basic_auth, secretHeader: row.secret_header, signature: row.signature };
}

/** The trigger URL of a source (Bearer or Basic), and with the secret in its path. */
export function triggerUrl(publicUrl: string, id: string): string {
  return `${publicUrl}/triggers/custom/${id}`;
}

export function toCustomSource(row: CustomSourceRow, publicUrl: string): CustomSource {
  return create(CustomSourceSchema, {
    id: row.id,
    name: row.name,
    badge: row.name,
    rules: rulesFromJson(row.rules),
    auth: authOptionsOf(authOfRow(row)),
    url: triggerUrl(publicUrl, row.id),
    credentialState: row.secret_hash ? "active" : "revoked",
    ...(row.credential_issued_at ? { credentialIssuedAt: timestampFromDate(row.credential_issued_at) } : {}),
    createdAt: timestampFromDate(row.created_at),
    preset: row.preset,
    description: row.description,
  });
}

/**
 * Compiled rules per source and version, so each process compiles a source's rules once per
 * change rather than once per delivery. Bounded: the oldest entry goes first.
 */
export function createCompiledRulesCache(limit = 1000) {
  const entries = new Map<string, { version: number; compiled: CompiledRules }>();
  return {
    get(row: CustomSourceRow): CompiledRules {
      const held = entries.get(row.id);
      if (held && held.version === row.version) return held.compiled;
      const compiled = compileRules(rulesFromJson(row.rules));
      entries.delete(row.id);
      entries.set(row.id, { version: row.version, compiled });
      if (entries.size > limit) entries.delete(entries.keys().next().value!);
      return compiled;
    },
  };
}

/** Headers as the rules see them: every one but the credentials the request was made with. */
export function headersForRules(headers: Record<string, string>): Record<string, string> {
  const seen: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (lower === "authorization" || lower === "proxy-authorization" || lower === "cookie") continue;
    seen[lower] = value;
  }
  return seen;
}

/** The most of a payload's body a source keeps, as JSON text. */
export const KEPT_BODY_BYTES = 64 * 1024;

/**
 * The most a body parsed from `n` bytes grows when written back as JSON: a number such as `1e20`
 * prints as 21 digits, a control character in a text body as `\u0001`. A body that small is kept
 * without writing it out to measure it.
 */
const MOST_JSON_GROWTH = 6;

/**
 * A body as kept: the JSON itself when small enough, else its first KEPT_BODY_BYTES as text.
 * `receivedBytes`, the size it arrived in, spares measuring a body that cannot be too big.
 */
export function boundedBody(body: unknown, receivedBytes = Number.POSITIVE_INFINITY): { body: JsonValue; truncated: boolean } {
  if ((receivedBytes + 1) * MOST_JSON_GROWTH <= KEPT_BODY_BYTES) return { body: (body ?? null) as JsonValue, truncated: false };
  const text = JSON.stringify(body ?? null);
  if (Buffer.byteLength(text, "utf8") <= KEPT_BODY_BYTES) return { body: (body ?? null) as JsonValue, truncated: false };
  return { body: Buffer.from(text, "utf8").subarray(0, KEPT_BODY_BYTES).toString("utf8"), truncated: true };
}

/**
 * Reads a custom source's body: JSON when it parses as JSON, form fields when declared as a form,
 * else the text itself, so that no sender's delivery is refused for its format. Only JSON nested
 * past the shared limit is refused (the rules read it recursively).
 */
export function parseCustomBody(bytes: Uint8Array, contentType: string): unknown {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
  const type = contentType.split(";")[0]!.trim().toLowerCase();
  if (type === "application/x-www-form-urlencoded") return Object.fromEntries(new URLSearchParams(text));
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return text;
  }
  if (nestedDeeperThan(value, MAX_JSON_DEPTH))
    throw new UnprocessablePayloadError("Unrecognized trigger payload", `the body is nested deeper than ${MAX_JSON_DEPTH} levels`);
  return value;
}

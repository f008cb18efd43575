import { createHmac } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import type { CustomSourceAuthOptions } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { InvalidArgumentError } from "../../runtime/errors.js";
import { constantTimeEqual } from "../../runtime/credentials/secrets.js";

/**
 * How a custom source's sender may prove it holds the secret besides `Authorization: Bearer`: the
 * secret as a named header's value, or an HMAC of the raw body (GitHub, Sentry, Standard Webhooks).
 */

/** A signature's settings as stored (`intake.custom_sources.signature`), defaults filled in. */
export interface SignatureSettings {
  header: string;
  algorithm: "sha1" | "sha256" | "sha512";
  prefix: string;
  encoding: "hex" | "base64";
  timestampHeader: string;
  toleranceSeconds: number;
  signedContent: "body" | "id.timestamp.body";
  idHeader: string;
}

/** The auth options as stored: the two older flags, a secret header's name, a signature. */
export interface SourceAuth {
  secretInPath: boolean;
  basicAuth: boolean;
  secretHeader: string;
  signature: SignatureSettings | null;
}

export const DEFAULT_TOLERANCE_SECONDS = 300;
const MOST_TOLERANCE_SECONDS = 86_400;
/** A header name as HTTP allows it (a token), lowercased: how headers reach the rules. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]{1,64}$/;
/** Headers a secret or a signature may not be read from: the transport's own or the credential's. */
const RESERVED_HEADERS = new Set(["authorization", "proxy-authorization", "cookie", "host", "content-type", "content-length", "x-forwarded-for"]);
const ALGORITHMS = ["sha1", "sha256", "sha512"] as const;
const ENCODINGS = ["hex", "base64"] as const;
const SIGNED_CONTENTS = ["body", "id.timestamp.body"] as const;
/** The most signatures one header may carry (Standard Webhooks sends one per active secret). */
const MOST_SIGNATURES = 8;
/** A secret the sender made: long enough to resist guessing, short enough for any header. */
export const SENDER_SECRET = { least: 16, most: 256 };

function headerName(field: string, value: string, required: boolean): string {
  const name = value.trim().toLowerCase();
  if (!name && !required) return "";
  if (!HEADER_NAME.test(name))
    throw new InvalidArgumentError(`auth.${field}: ${JSON.stringify(value)} is not a header name (letters, digits and -, at most 64)`);
  if (RESERVED_HEADERS.has(name))
    throw new InvalidArgumentError(`auth.${field}: the ${name} header cannot carry a source's secret or signature; name the header your tool sends`);
  return name;
}

function oneOf<T extends string>(field: string, value: string, allowed: readonly T[], fallback: T): T {
  const chosen = value.trim().toLowerCase() || fallback;
  if (!(allowed as readonly string[]).includes(chosen))
    throw new InvalidArgumentError(`auth.signature.${field}: ${JSON.stringify(value)} is not one of ${allowed.join(", ")}`);
  return chosen as T;
}

/** The auth options of a request, checked and with their defaults; refused with what to fix. */
export function sourceAuthFrom(options: Omit<CustomSourceAuthOptions, "$typeName"> | undefined): SourceAuth {
  const auth: SourceAuth = {
    secretInPath: options?.secretInPath ?? false,
    basicAuth: options?.basicAuth ?? false,
    secretHeader: headerName("secretHeader", options?.secretHeader ?? "", false),
    signature: null,
  };
  const sig = options?.signature;
  if (!sig) return auth;
  const signedContent = oneOf("signedContent", sig.signedContent, SIGNED_CONTENTS, "body");
  const timestampHeader = headerName("signature.timestampHeader", sig.timestampHeader, signedContent !== "body");
  if (sig.toleranceSeconds > MOST_TOLERANCE_SECONDS)
    throw new InvalidArgumentError(`auth.signature.toleranceSeconds: at most ${MOST_TOLERANCE_SECONDS} (a day)`);
  if (sig.prefix.length > 32) throw new InvalidArgumentError("auth.signature.prefix: at most 32 characters");
  auth.signature = {
    header: headerName("signature.header", sig.header, true),
    algorithm: oneOf("algorithm", sig.algorithm, ALGORITHMS, "sha256"),
    prefix: sig.prefix,
    encoding: oneOf("encoding", sig.encoding, ENCODINGS, "hex"),
    timestampHeader,
    toleranceSeconds: sig.toleranceSeconds || DEFAULT_TOLERANCE_SECONDS,
    signedContent,
    idHeader: headerName("signature.idHeader", sig.idHeader, signedContent !== "body"),
  };
  return auth;
}

/** The options as the API shows them. */
export function authOptionsOf(auth: SourceAuth): Omit<CustomSourceAuthOptions, "$typeName"> {
  return {
    secretInPath: auth.secretInPath,
    basicAuth: auth.basicAuth,
    secretHeader: auth.secretHeader,
    ...(auth.signature ? { signature: { $typeName: "warroom.intake.v1.CustomSourceSignature", ...auth.signature } } : {}),
  };
}

/** A sender's own secret, checked: printable, no spaces, 16 to 256 characters. */
export function senderSecret(value: string): string {
  if (value.length < SENDER_SECRET.least || value.length > SENDER_SECRET.most || !/^[\x21-\x7e]+$/.test(value)) {
    throw new InvalidArgumentError(
      `secret: the sender's secret must be ${SENDER_SECRET.least} to ${SENDER_SECRET.most} printable characters without spaces; leave it empty to have one issued`,
    );
  }
  if (value.startsWith("whsec_") && Buffer.from(value.slice(6), "base64").length < 16) {
    throw new InvalidArgumentError("secret: a whsec_ secret must carry at least 16 bytes in base64 after whsec_");
  }
  return value;
}

/** The HMAC key of a secret: a Standard Webhooks `whsec_` secret's base64 tail, else its bytes. */
function hmacKey(secret: string): Buffer {
  return secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret, "utf8");
}

/** Why a signed delivery is refused, for the log (never for the sender, who gets the one 401). */
export type SignatureVerdict = "valid" | "missing" | "stale" | "mismatch";

/**
 * Checks a delivery's signature over its raw bytes. Every candidate in the header is compared in
 * constant time against the expected digest; the timestamp, when the source names its header, must
 * be within the tolerance of `now` either way, so a captured delivery cannot be replayed later.
 */
export function verifySignature(
  settings: SignatureSettings,
  secret: string,
  body: Uint8Array,
  header: (name: string) => string | undefined,
  now: Date,
): SignatureVerdict {
  const presented = header(settings.header);
  if (!presented) return "missing";
  let timestamp = "";
  if (settings.timestampHeader) {
    timestamp = header(settings.timestampHeader)?.trim() ?? "";
    if (!/^\d{1,12}$/.test(timestamp)) return "missing";
    if (Math.abs(now.getTime() / 1000 - Number(timestamp)) > settings.toleranceSeconds) return "stale";
  }
  const hmac = createHmac(settings.algorithm, hmacKey(secret));
  if (settings.signedContent === "id.timestamp.body") {
    const id = header(settings.idHeader)?.trim() ?? "";
    if (!id) return "missing";
    hmac.update(`${id}.${timestamp}.`, "utf8");
  }
  hmac.update(body);
  const expected = hmac.digest();
  const candidates = presented.trim().split(/\s+/).slice(0, MOST_SIGNATURES);
  let matched = false;
  for (const candidate of candidates) {
    if (!candidate.startsWith(settings.prefix)) continue;
    const encoded = candidate.slice(settings.prefix.length);
    const valid = settings.encoding === "hex" ? /^[0-9a-fA-F]+$/.test(encoded) : /^[A-Za-z0-9+/]+={0,2}$/.test(encoded);
    if (!valid) continue;
    // Every candidate is compared, so the time taken does not say which one matched.
    if (constantTimeEqual(Buffer.from(encoded, settings.encoding), expected)) matched = true;
  }
  return matched ? "valid" : "mismatch";
}

/** Whether a presented header value is the secret, compared by SHA-256 in constant time. */
export function secretHeaderMatches(presentedHash: Buffer, storedHash: Buffer | null): boolean {
  return storedHash !== null && constantTimeEqual(presentedHash, storedHash);
}

const SIGNATURE_FIELDS = ["header", "algorithm", "prefix", "encoding", "timestampHeader", "toleranceSeconds", "signedContent", "idHeader"] as const;

/** Whether two sources take their credential the same ways (a stored signature's keys come back in jsonb's order). */
export function sameAuth(a: SourceAuth, b: SourceAuth): boolean {
  if (a.secretInPath !== b.secretInPath || a.basicAuth !== b.basicAuth || a.secretHeader !== b.secretHeader) return false;
  if (!a.signature || !b.signature) return a.signature === b.signature;
  return SIGNATURE_FIELDS.every((field) => a.signature![field] === b.signature![field]);
}

/** The options as a configuration file writes them: only what differs from the defaults; none: undefined. */
export function authEntry(auth: SourceAuth): JsonObject | undefined {
  const entry: JsonObject = {};
  if (auth.secretInPath) entry.secretInPath = true;
  if (auth.basicAuth) entry.basicAuth = true;
  if (auth.secretHeader) entry.secretHeader = auth.secretHeader;
  if (auth.signature) {
    const { header, algorithm, prefix, encoding, timestampHeader, toleranceSeconds, signedContent, idHeader } = auth.signature;
    const signature: JsonObject = { header, algorithm, encoding };
    if (prefix) signature.prefix = prefix;
    if (timestampHeader) Object.assign(signature, { timestampHeader, toleranceSeconds });
    if (signedContent !== "body") Object.assign(signature, { signedContent, idHeader });
    entry.signature = signature;
  }
  return Object.keys(entry).length > 0 ? entry : undefined;
}

/**
 * Redaction of what a kept custom-source payload shows admins: a header or query parameter whose
 * name says it carries a credential has its value kept as `[redacted]`. Senders put credentials
 * in many places (`?token=`, `?api_key=`, `X-Access-Key`, `Authentication`, `X-Passwd`), so the
 * name is split into its word parts (at `-`, `_`, `.`, digits and lowerCamel boundaries) and any
 * part that names a credential redacts it: `x-api-key` and `apiKey` are redacted, `monkey` and
 * `x-keyboard` are not.
 */

export const REDACTED = "[redacted]";

/** Word parts that are credentials on their own. */
const CREDENTIAL_WORDS = new Set([
  "key",
  "apikey",
  "accesskey",
  "secretkey",
  "privatekey",
  "auth",
  "authn",
  "authz",
  "authorization",
  "authentication",
  "bearer",
  "jwt",
  "pass",
  "pwd",
  "sig",
  "sid",
  "otp",
  "genie",
]);

/** Words that name a credential inside a longer part too (`accesstoken`, `sessionid`, `xsrftoken`). */
const CREDENTIAL_STEMS = ["token", "secret", "password", "passwd", "passphrase", "credential", "signature", "session", "cookie"];

/** The lowercase word parts of a header or parameter name. */
function wordParts(name: string): string[] {
  return name
    .replace(/([a-z])([A-Z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z]+/)
    .filter((part) => part.length > 0);
}

/** Whether a header or query parameter of this name carries a credential. */
export function namesCredential(name: string): boolean {
  return wordParts(name).some((part) => CREDENTIAL_WORDS.has(part) || CREDENTIAL_STEMS.some((stem) => part.includes(stem)));
}

/** Headers (names lowercased) or query parameters as a kept payload shows them: credentials redacted. */
export function redactCredentials(values: Record<string, string>, options: { lowercaseNames?: boolean } = {}): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(values)) kept[options.lowercaseNames ? name.toLowerCase() : name] = namesCredential(name) ? REDACTED : value;
  return kept;
}

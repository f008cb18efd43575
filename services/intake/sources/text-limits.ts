/** Cuts to at most `maxBytes` of UTF-8 without splitting a character. */
export function cutUtf8(text: string, maxBytes: number): string {
  // Every UTF-16 code unit is at most 3 UTF-8 bytes, so short strings need no encoding.
  if (text.length * 3 <= maxBytes) return text;
  // encodeInto stops before the first character that would not fit, never inside a surrogate
  // pair, and writes a lone surrogate as U+FFFD (three bytes): `read` is where to cut. Natively,
  // and only as far as `maxBytes`, however long the text.
  if (scratch.byteLength < maxBytes) scratch = new Uint8Array(maxBytes);
  const { read } = utf8Encoder.encodeInto(text, scratch.subarray(0, maxBytes));
  return read === text.length ? text : text.slice(0, read);
}

const utf8Encoder = new TextEncoder();
let scratch = new Uint8Array(0);

/**
 * storableText, then cut to `maxBytes`, without first rewriting all of a long text: the cut comes
 * first (bounding the work to `maxBytes`), then again after the rewrite, which may lengthen it.
 * The result is the same as cutting the whole rewritten text.
 */
export function storableCut(text: string, maxBytes: number): string {
  return cutUtf8(storableText(cutUtf8(text, maxBytes)), maxBytes);
}

/** Cuts to at most `maxCharacters` code points, never leaving half a surrogate pair. */
export function cutCharacters(text: string, maxCharacters: number): string {
  if (text.length <= maxCharacters) return text;
  let count = 0;
  let end = 0;
  for (const character of text) {
    if (count === maxCharacters) break;
    count += 1;
    end += character.length;
  }
  return text.slice(0, end);
}

/** The length of a string in UTF-8 bytes. */
export function utf8ByteLength(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Replaces what storage cannot hold: Postgres text and jsonb refuse NUL, and a lone surrogate
 * makes `encodeURIComponent` throw. Deterministic, so identities built from the result stay stable.
 */
export function storableText(text: string): string {
  // Nearly every text is already storable: two native scans answer that without copying it.
  if ((text as WellFormedString).isWellFormed() && !text.includes("\u0000")) return text;
  return text.replaceAll("\u0000", "\uFFFD").replace(LONE_SURROGATE, "\uFFFD");
}

/** ES2024's String.prototype.isWellFormed (Node 20 has it; the compiler's ES2023 library does not name it). */
type WellFormedString = string & { isWellFormed(): boolean };

/** `encodeURIComponent` that cannot throw on foreign text. */
export function encodePathSegment(text: string): string {
  return encodeURIComponent(storableText(text));
}

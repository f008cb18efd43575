/** Cuts to at most `maxBytes` of UTF-8 without splitting a character. */
export function cutUtf8(text: string, maxBytes: number): string {
  // Every UTF-16 code unit is at most 3 UTF-8 bytes, so short strings need no walk.
  if (text.length * 3 <= maxBytes) return text;
  let bytes = 0;
  let end = 0;
  for (const character of text) {
    const size = utf8Size(character.codePointAt(0) ?? 0);
    if (bytes + size > maxBytes) break;
    bytes += size;
    end += character.length;
  }
  return text.slice(0, end);
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

function utf8Size(codePoint: number): number {
  if (codePoint < 0x80) return 1;
  if (codePoint < 0x800) return 2;
  // Lone surrogates are encoded as U+FFFD, which is three bytes as well.
  if (codePoint < 0x10000) return 3;
  return 4;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Replaces what storage cannot hold: Postgres text and jsonb refuse NUL, and a lone surrogate
 * makes `encodeURIComponent` throw. Deterministic, so identities built from the result stay stable.
 */
export function storableText(text: string): string {
  return text.replaceAll("\u0000", "\uFFFD").replace(LONE_SURROGATE, "\uFFFD");
}

/** `encodeURIComponent` that cannot throw on foreign text. */
export function encodePathSegment(text: string): string {
  return encodeURIComponent(storableText(text));
}

/** What the job said: the first 10 KiB of a ping's body, as text. */
export const BODY_KEEP_BYTES = 10 * 1024;

export interface KeptBody {
  /** The text kept ("" for an empty or binary body). */
  text: string;
  /** The body was longer than what is kept. */
  cut: boolean;
  /** The size of the whole body in bytes. */
  bytes: number;
  /** The body was not UTF-8 text: nothing of it is kept. */
  binary: boolean;
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * What is kept of a ping's body: its first 10 KiB as text, cut on a character boundary, with
 * whether it was cut or binary and its full size.
 */
export function keepBody(body: Uint8Array): KeptBody {
  const bytes = body.byteLength;
  if (bytes === 0) return { text: "", cut: false, bytes, binary: false };
  let end = Math.min(bytes, BODY_KEEP_BYTES);
  const cut = end < bytes;
  // Never split a character: step back over continuation bytes (10xxxxxx) to a character start.
  if (cut) {
    let start = end;
    while (start > 0 && (body[start]! & 0xc0) === 0x80) start--;
    end = start;
  }
  let text: string;
  try {
    text = decoder.decode(body.subarray(0, end));
  } catch {
    return { text: "", cut: false, bytes, binary: true };
  }
  // A NUL is not text (and Postgres text cannot hold one).
  if (text.includes("\u0000")) return { text: "", cut: false, bytes, binary: true };
  return { text, cut, bytes, binary: false };
}

/** The body as a timeline entry shows it, with the cut marked. */
export function describeBody(body: { text: string; cut: boolean; bytes: number }): string {
  // Nothing kept of a body that had bytes: it was not text.
  if (!body.text) return body.bytes > 0 ? `(a binary body of ${body.bytes} bytes, not kept)` : "";
  const kept = Buffer.byteLength(body.text);
  return body.cut ? `${body.text}\n[… cut: the first ${kept} of ${body.bytes} bytes are shown]` : body.text;
}

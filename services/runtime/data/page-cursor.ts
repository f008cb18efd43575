import { InvalidArgumentError } from "../errors.js";

/**
 * Cursors of paged lists: opaque to callers (base64url), positional for us (the last item of the
 * previous page), so a page never repeats or skips an item added meanwhile. `kind` keeps a cursor
 * of one list from being taken for another's.
 */
export function encodeCursor(kind: string, value: string): string {
  return Buffer.from(`${kind}:${value}`).toString("base64url");
}

/**
 * The value inside a page cursor of `kind`; a cursor this list did not give, or whose value is not
 * `valid`, is InvalidArgument.
 */
export function decodeCursor(kind: string, cursor: string, valid: (value: string) => boolean): string {
  const text = Buffer.from(cursor, "base64url").toString();
  const value = text.startsWith(`${kind}:`) ? text.slice(kind.length + 1) : undefined;
  if (value === undefined || !valid(value)) throw new InvalidArgumentError("cursor is not one this list gave");
  return value;
}

/** The page size a request asks for: `fallback` when unset, refused outside 1..max. */
export function pageLimit(requested: number, fallback: number, max: number): number {
  const limit = requested === 0 ? fallback : requested;
  if (!Number.isInteger(limit) || limit < 1 || limit > max) throw new InvalidArgumentError(`limit must be between 1 and ${max}`);
  return limit;
}

/**
 * A list request's page: its size (`fallback` when unset, refused outside 1..max) and the value of
 * its cursor of `kind`, if any (refused when this list did not give it).
 */
export function pageRequest(
  req: { limit: number; cursor: string },
  kind: string,
  valid: (value: string) => boolean,
  size: { fallback: number; max: number },
): { limit: number; after: string | undefined } {
  return { limit: pageLimit(req.limit, size.fallback, size.max), after: req.cursor ? decodeCursor(kind, req.cursor, valid) : undefined };
}

/** Splits the `limit + 1` rows a page query read into the page and, when more follow, the cursor. */
export function pageOf<T>(rows: T[], limit: number, cursorOf: (last: T) => string): { page: T[]; nextCursor?: string } {
  if (rows.length <= limit) return { page: rows };
  const page = rows.slice(0, limit);
  return { page, nextCursor: cursorOf(page.at(-1)!) };
}

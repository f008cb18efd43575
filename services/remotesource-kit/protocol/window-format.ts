import type { JsonValue } from "@bufbuild/protobuf";
import type { WINDOW_FORMATS } from "./limits.js";

type WindowFormat = (typeof WINDOW_FORMATS)[number];

/**
 * A WindowSpec names a windowed operation's own start/end parameters and their format. These turn
 * epoch milliseconds into a parameter value of that format and back: the caller formats, the
 * source parses.
 */
export function formatWindowValue(epochMs: number, format: string): JsonValue {
  switch (format as WindowFormat) {
    case "date":
      return new Date(epochMs).toISOString().slice(0, 10);
    case "iso":
      return new Date(epochMs).toISOString();
    case "epoch-s":
      return Math.floor(epochMs / 1000);
    case "epoch-ms":
      return Math.floor(epochMs);
    case "epoch-ns":
      // Beyond 2^53: a JSON number would lose digits.
      return (BigInt(Math.floor(epochMs)) * 1_000_000n).toString();
    case "grafana":
      return String(Math.floor(epochMs));
    default:
      throw new RangeError(`unknown window format ${JSON.stringify(format)}`);
  }
}

const GRAFANA_RELATIVE = /^now(?:-(\d+)([smhdw]))?$/;
const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Epoch milliseconds from a window parameter value; throws RangeError when it does not parse. */
export function parseWindowValue(value: JsonValue | undefined, format: string, nowMs = Date.now()): number {
  const bad = () => new RangeError(`${JSON.stringify(value)} is not a ${format} time`);
  if (value === undefined || value === null || typeof value === "boolean" || typeof value === "object") throw bad();
  const text = String(value).trim();
  let ms: number;
  switch (format as WindowFormat) {
    case "date":
      if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) throw bad();
      ms = Date.parse(`${text}T00:00:00Z`);
      break;
    case "iso":
      ms = /^\d{4}-\d{2}-\d{2}T/.test(text) ? Date.parse(text) : NaN;
      break;
    case "epoch-s":
      ms = /^-?\d+(\.\d+)?$/.test(text) ? Number(text) * 1000 : NaN;
      break;
    case "epoch-ms":
      ms = /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
      break;
    case "epoch-ns":
      ms = /^-?\d+$/.test(text) ? Number(BigInt(text) / 1_000_000n) : NaN;
      break;
    case "grafana": {
      const relative = GRAFANA_RELATIVE.exec(text);
      if (relative) ms = nowMs - (relative[1] ? Number(relative[1]) * UNIT_MS[relative[2]!]! : 0);
      else ms = /^\d+$/.test(text) ? Number(text) : NaN;
      break;
    }
    default:
      throw new RangeError(`unknown window format ${JSON.stringify(format)}`);
  }
  if (!Number.isFinite(ms)) throw bad();
  return ms;
}

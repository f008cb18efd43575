import type { JsonValue } from "@bufbuild/protobuf";
import { UnprocessablePayloadError, unprocessableOf } from "../../runtime/errors.js";
import { InvalidUtf8Error, parseTriggerBody } from "../request-body.js";
import { stableDigest } from "../retry-recognition.js";
import { digestOfBytes } from "../sources/normalized-alert.js";
import { type CompiledRules, compileRules, evaluateRules, type MappingResult } from "../../cel/cel-mapping.js";
import { boundedBody, compileAttachKey, createCompiledRulesCache, headersForRules, parseCustomBody, rulesFromJson } from "./custom-source-records.js";
import type { CustomSourceRow, RuleJson } from "./store.js";

/**
 * The work a large custom-source body needs, as a worker thread does it (large-body-worker.ts):
 * everything that reads the whole body, with the answer the event loop needs and nothing more.
 * The functions are the ones the event loop uses for small bodies, so both give the same answers.
 */

/** A delivery's body to parse, keep and map with its source's rules (by id and version). */
export interface DeliverTask {
  kind: "deliver";
  bytes: Uint8Array;
  contentType: string;
  source: { id: string; version: number; rules: RuleJson[] };
  headers: Record<string, string>;
  query: Record<string, string>;
  receivedAtMs: number;
  /** Whether the sender named the delivery with an Idempotency-Key: then its body's digest is kept with the key. */
  wantsBodyDigest: boolean;
}

/** A body to parse and give one grouping override's attach-key expression. */
export interface AttachKeyTask {
  kind: "attach-key";
  bytes: Uint8Array;
  contentType: string;
  expression: string;
}

/**
 * Rules over a body the event loop already holds parsed (a preview's payload, a built-in source's
 * alert under a grouping override), posted by structured clone: a saved source's rules (compiled
 * once per version), rules given with a preview, or a grouping override's attach key.
 */
export interface EvaluateTask {
  kind: "evaluate";
  rules: { source: { id: string; version: number; rules: RuleJson[] } } | { given: RuleJson[] } | { attachKey: string };
  body: unknown;
  headers: Record<string, string>;
  query: Record<string, string>;
  receivedAtMs: number;
}

/**
 * A built-in route's JSON body to read (parseTriggerBody): decoding 1 MiB into one string costs
 * the event loop milliseconds; the parsed value comes back by structured clone, string by string.
 */
export interface ParseTask {
  kind: "parse";
  bytes: Uint8Array;
  contentType: string;
}

/** The body read, or why it was refused: parseTriggerBody's errors, to be thrown again as they were. */
export type ParseAnswer = { value: unknown } | { refused: { invalidUtf8: true } | { message: string; details: string } };

export type LargeBodyTask = DeliverTask | AttachKeyTask | EvaluateTask | ParseTask;

export type DeliverAnswer =
  | { refused: { message: string; details: string } }
  | {
      kept: { body: JsonValue; truncated: boolean };
      result: MappingResult;
      /** The digest of the bytes, the default incident's event id: only when the mapping failed. */
      rawDigest?: string;
      /** stableDigest(["body", body]) as retry-keys.ts keeps it, when asked for. */
      bodyDigest?: string;
    };

const compiledRules = createCompiledRulesCache(100);
const attachKeys = new Map<string, CompiledRules>();

/** The grouping override's expression compiled once per thread. */
function attachKeyRules(expression: string): CompiledRules {
  let compiled = attachKeys.get(expression);
  if (!compiled) {
    compiled = compileAttachKey(expression);
    attachKeys.set(expression, compiled);
    if (attachKeys.size > 100) attachKeys.delete(attachKeys.keys().next().value!);
  }
  return compiled;
}

function rulesOf(rules: EvaluateTask["rules"]): CompiledRules {
  if ("attachKey" in rules) return attachKeyRules(rules.attachKey);
  if ("given" in rules) return compileRules(rulesFromJson(rules.given));
  return compiledRules.get({ id: rules.source.id, version: rules.source.version, rules: rules.source.rules } as CustomSourceRow);
}

export function runLargeBodyTask(task: LargeBodyTask): DeliverAnswer | MappingResult | ParseAnswer {
  if (task.kind === "parse") {
    try {
      return { value: parseTriggerBody(task.bytes, task.contentType, { allowForm: false }) };
    } catch (err) {
      if (err instanceof InvalidUtf8Error) return { refused: { invalidUtf8: true } };
      if (err instanceof UnprocessablePayloadError) return { refused: { message: err.message, details: unprocessableOf(err)?.details ?? "" } };
      throw err;
    }
  }
  if (task.kind === "evaluate") {
    try {
      return evaluateRules(rulesOf(task.rules), { body: task.body, headers: task.headers, query: task.query, receivedAt: new Date(task.receivedAtMs) });
    } catch (err) {
      return { verdicts: [], warnings: [], error: `the rules could not be compiled: ${(err as Error).message}` };
    }
  }
  let body: unknown;
  try {
    body = parseCustomBody(task.bytes, task.contentType);
  } catch (err) {
    if (!(err instanceof UnprocessablePayloadError)) throw err;
    return { refused: { message: err.message, details: unprocessableOf(err)?.details ?? "" } };
  }
  if (task.kind === "attach-key") return evaluateRules(attachKeyRules(task.expression), { body, headers: {}, query: {}, receivedAt: new Date() });

  const kept = boundedBody(body, task.bytes.byteLength);
  let result: MappingResult;
  try {
    const rules = compiledRules.get({ id: task.source.id, version: task.source.version, rules: task.source.rules } as CustomSourceRow);
    result = evaluateRules(rules, { body, headers: headersForRules(task.headers), query: task.query, receivedAt: new Date(task.receivedAtMs) });
  } catch (err) {
    // Rules saved by an older version that no longer compile: still never lose the delivery.
    result = { verdicts: [], warnings: [], error: `the rules could not be compiled: ${(err as Error).message}` };
  }
  return {
    kept,
    result,
    ...(result.error || !result.fields ? { rawDigest: digestOfBytes(task.bytes) } : {}),
    ...(task.wantsBodyDigest ? { bodyDigest: stableDigest(["body", body]) } : {}),
  };
}

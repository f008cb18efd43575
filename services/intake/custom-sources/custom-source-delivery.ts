import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { OrganizationSchema } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { DeliverCustomSourceRequest } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { RateLimitedError, UnauthenticatedError, UnprocessablePayloadError } from "../../runtime/errors.js";
import { type Broadcast, CUSTOM_SOURCE_CHANGED } from "../../runtime/transport/broadcast.js";
import type { Logger } from "../../runtime/observability/logger.js";
import { customSourceRecordsDropped } from "../../runtime/observability/metrics.js";
import { outsideCall } from "../../runtime/http/request-context.js";
import { createRevocableCache } from "../../runtime/credentials/revocable-cache.js";
import { sha256 } from "../../runtime/credentials/secrets.js";
import { isUuid } from "../../runtime/ids.js";
import type { DeliveryPath, TriggerAnswer } from "../delivery.js";
import { RECEIVER_FAILURES_PER_MINUTE } from "../receiver-secrets.js";
import { digestOfBytes, toAlertDelivery } from "../sources/normalized-alert.js";
import type { MappedDelivery } from "../sources/index.js";
import type { ReceiverFailureStore } from "../store.js";
import { evaluateRules, type MappingResult } from "../../cel/cel-mapping.js";
import { REDACTED, redactCredentials } from "./credential-redaction.js";
import { sealedSecretPlace } from "./custom-source-records.js";
import { secretHeaderMatches, verifySignature } from "./source-auth.js";
import type { SecretBox } from "../../runtime/credentials/secret-box.js";
import { boundedBody, type createCompiledRulesCache, headersForRules, KEPT_BODY_BYTES, parseCustomBody } from "./custom-source-records.js";
import { LARGE_BODY_BYTES, type LargeBodies } from "./large-bodies.js";
import { IDEMPOTENCY_KEY_HEADER } from "../retry-keys.js";
import type { CustomSourceRow, CustomSourceStore, DeliveryLogEntry, DeliveryRecord, DeliveryRecordStore } from "./store.js";

/** The title of the incident a delivery opens when its source's rules could not map it. */
export function unmappedTitle(sourceName: string): string {
  return `Unmapped alert from ${sourceName}`;
}

/** The credential a request presents: the path segment, a Bearer token, or a Basic password. */
function presentedSecret(req: DeliverCustomSourceRequest, authorization: string | null): { secret: string; via: "path" | "bearer" | "basic" } | undefined {
  if (req.pathSecret) return { secret: req.pathSecret, via: "path" };
  if (!authorization) return undefined;
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (bearer) return { secret: bearer[1]!, via: "bearer" };
  const basic = /^Basic\s+(\S+)\s*$/i.exec(authorization);
  if (basic) {
    const decoded = Buffer.from(basic[1]!, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon >= 0) return { secret: decoded.slice(colon + 1), via: "basic" };
  }
  return undefined;
}

/**
 * Every request header, from the REST gateway's copy (which leaves the credentials out: they
 * reach us as headers of the call) or the Connect/gRPC request itself. The credential is kept by
 * name only, so a kept payload shows that one was sent.
 */
function requestHeaders(req: DeliverCustomSourceRequest, context: HandlerContext): Record<string, string> {
  let headers: Record<string, string> = {};
  if (Object.keys(req.requestHeaders).length > 0) headers = { ...req.requestHeaders };
  else {
    context.requestHeader.forEach((value, name) => {
      headers[name] = value;
    });
  }
  if (context.requestHeader.has("authorization")) headers.authorization = REDACTED;
  return headers;
}

/** One request header (lowercase name), from the REST gateway's copy or the call's own headers. */
function headerOf(req: DeliverCustomSourceRequest, context: HandlerContext, name: string): string | undefined {
  if (Object.keys(req.requestHeaders).length > 0) return req.requestHeaders[name];
  return context.requestHeader.get(name) ?? undefined;
}

/** The scope failed credentials are counted in: every custom-source route shares one budget per address. */
export const CUSTOM_SOURCE_FAILURE_SCOPE = "custom-source";

/**
 * A custom source's trigger route: authenticates the source's credential, keeps the payload,
 * maps it with the source's rules and hands it to the shared delivery path. A mapping that fails
 * never loses the delivery: it opens (or repeats on) the source's default incident, holding the
 * raw payload and the error.
 */
export function createCustomSourceDelivery(deps: {
  store: Pick<CustomSourceStore, "byCredential" | "byId">;
  compiled: ReturnType<typeof createCompiledRulesCache>;
  delivery: DeliveryPath;
  failures: ReceiverFailureStore;
  broadcast: Broadcast;
  records: RecordWriter;
  /** Worker threads for bodies over LARGE_BODY_BYTES; none: every body is handled on the event loop. */
  largeBodies?: LargeBodies | undefined;
  /** Opens the sealed secrets that signatures are checked with. */
  secretBox?: (() => SecretBox) | undefined;
  logger?: Logger | undefined;
}) {
  const { store, compiled, delivery, failures, records, largeBodies, logger } = deps;
  const need = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error("no secret box: signatures cannot be checked in this process");
    return value;
  };
  // The source lookup by id and credential, cached per process: a storm sends one source's
  // credential thousands of times a second. Grouped by source id, which a change broadcasts.
  const sources = createRevocableCache<CustomSourceRow>({ broadcast: deps.broadcast, subject: CUSTOM_SOURCE_CHANGED });

  /** The source whose current credential the request presents, when it presents one it may use. */
  async function credentialed(req: DeliverCustomSourceRequest, context: HandlerContext, receivedAt: Date): Promise<CustomSourceRow | undefined> {
    if (!isUuid(req.sourceId)) return undefined;
    const presented = presentedSecret(req, context.requestHeader.get("authorization"));
    if (!presented) return byHeaderOrSignature(req, context, receivedAt);
    if (presented.secret.length > 256) return undefined;
    const hash = sha256(presented.secret);
    const row = await sources.get(`${req.sourceId}:${hash.toString("hex")}`, req.sourceId, () => store.byCredential(req.sourceId, hash), context.signal);
    if (!row) return undefined;
    if (presented.via === "path" && !row.secret_in_path) return undefined;
    if (presented.via === "basic" && !row.basic_auth) return undefined;
    return row;
  }

  /**
   * The source, when the request carries its secret in the header the source names, or a valid
   * signature of its body made with the secret. The source is looked up by id alone (cached like
   * the others), and the proof checked against it in constant time.
   */
  async function byHeaderOrSignature(req: DeliverCustomSourceRequest, context: HandlerContext, receivedAt: Date): Promise<CustomSourceRow | undefined> {
    const row = await sources.get(`${req.sourceId}:by-id`, req.sourceId, () => store.byId(req.sourceId), context.signal);
    if (!row) return undefined;
    const header = (name: string) => headerOf(req, context, name);
    const secret = row.secret_header ? header(row.secret_header) : undefined;
    if (secret !== undefined) return secret.length <= 256 && secretHeaderMatches(sha256(secret), row.secret_hash) ? row : undefined;
    if (!row.signature || !row.secret_sealed || !row.secret_sealed_by) return undefined;
    let opened: string;
    try {
      opened = need(deps.secretBox)().open({ keyId: row.secret_sealed_by, ciphertext: row.secret_sealed }, sealedSecretPlace(row.id));
    } catch (err) {
      // A key missing from SECRETS_KEYS, or a damaged value: the operator's to fix, the sender's refusal.
      logger?.warn({ err: String(err), source: row.id }, "could not open a custom source's sealed secret to check a signature");
      return undefined;
    }
    return verifySignature(row.signature, opened, req.body, header, receivedAt) === "valid" ? row : undefined;
  }

  /**
   * The credential is checked first, always, so the right one is never refused for anybody's
   * failures (senders share address ranges). A failure of any kind (no credential, an unknown
   * source, a wrong or revoked secret, a way of presenting it the source does not accept) gets one
   * answer, so a caller cannot tell them apart, and is counted per client address over every
   * custom-source route, as the chat and alert-router receivers count theirs: past the limit the
   * address is answered 429 with Retry-After until its minute ends.
   */
  async function authenticate(req: DeliverCustomSourceRequest, context: HandlerContext, receivedAt: Date): Promise<CustomSourceRow> {
    const row = await credentialed(req, context, receivedAt);
    if (row) return row;
    const failed = await failures.add(CUSTOM_SOURCE_FAILURE_SCOPE, context.requestHeader.get("x-forwarded-for") ?? "");
    if (failed.failures > RECEIVER_FAILURES_PER_MINUTE) {
      throw new RateLimitedError("too many failed attempts from this address; try again later", Math.max(1, failed.retry_after));
    }
    throw new UnauthenticatedError("unauthorized: send the source's current credential as Authorization: Bearer <secret>");
  }

  function mapping(row: CustomSourceRow, body: unknown, headers: Record<string, string>, query: Record<string, string>, receivedAt: Date): MappingResult {
    try {
      return evaluateRules(compiled.get(row), { body, headers: headersForRules(headers), query, receivedAt });
    } catch (err) {
      // Rules saved by an older version that no longer compile: still never lose the delivery.
      return { verdicts: [], warnings: [], error: `the rules could not be compiled: ${(err as Error).message}` };
    }
  }

  return {
    async deliver(req: DeliverCustomSourceRequest, context: HandlerContext): Promise<TriggerAnswer> {
      const receivedAt = new Date();
      const row = await authenticate(req, context, receivedAt);
      await delivery.admitBody(row.org_id, `custom:${row.id}`, req.body.byteLength, context);
      const headers = requestHeaders(req, context);
      // The header that carried the secret is kept by name only, as Authorization is.
      if (row.secret_header && row.secret_header in headers) headers[row.secret_header] = REDACTED;
      const query = { ...req.queryParams };
      const org = create(OrganizationSchema, { id: row.org_id, slug: row.org_slug });
      // The rules run within the organization's share (not before it): an organization whose
      // mapping is costly spends its own share, and a delivery its share refuses is never mapped.
      let result: MappingResult | undefined;
      let kept: KeptBody | undefined;
      let body: unknown;
      let mapped: () => MappedDelivery | Promise<MappedDelivery>;
      let unprocessable = false;
      if (largeBodies && req.body.byteLength > LARGE_BODY_BYTES) {
        // Parsed, kept and mapped on a worker thread, in the organization's turn there: the event
        // loop hands the bytes over and gets the answer back (large-bodies.ts).
        const offloaded = largeBodies.offloaded(row.org_id, req.body, req.contentType);
        body = offloaded;
        mapped = async () => {
          const answer = await largeBodies.deliver(row.org_id, {
            bytes: req.body,
            contentType: req.contentType,
            source: { id: row.id, version: row.version, rules: row.rules },
            headers,
            query,
            receivedAtMs: receivedAt.getTime(),
            wantsBodyDigest: Boolean(context.requestHeader.get(IDEMPOTENCY_KEY_HEADER)?.trim()),
          });
          if ("refused" in answer) {
            unprocessable = true;
            throw new UnprocessablePayloadError(answer.refused.message, answer.refused.details);
          }
          ({ kept, result } = answer);
          offloaded.bodyDigest = answer.bodyDigest;
          return toMappedDelivery(row, offloaded, req.body, answer.result, answer.kept, answer.rawDigest);
        };
      } else {
        const parsed = parseCustomBody(req.body, req.contentType);
        // Bounded once: a large body's serialization is the costliest step after parsing it.
        const bounded = boundedBody(parsed, req.body.byteLength);
        body = parsed;
        kept = bounded;
        mapped = () => {
          result = mapping(row, parsed, headers, query, receivedAt);
          return toMappedDelivery(row, parsed, req.body, result, bounded);
        };
      }
      // The kept payload and the log row are written after the answer, with those of the deliveries
      // answered about the same time, and never cost the sender its delivery nor its time.
      const keepAndLog = (entry: DeliveryLogEntry) =>
        records.write({
          sourceId: row.id,
          receivedAt,
          payload: { ...(kept ?? unparsedKept(req.body)), headers: redactCredentials(headers, { lowercaseNames: true }), query: redactCredentials(query) },
          entry,
        });
      let answer: TriggerAnswer;
      try {
        answer = await delivery.deliver(org, `custom:${row.id}`, "custom", body, mapped, context);
      } catch (err) {
        // A body nested too deeply is refused as it always was, with nothing kept.
        if (unprocessable) throw err;
        keepAndLog({ outcome: "failed", rule: result?.matchedRule, error: `not delivered: ${(err as Error).message}`, warnings: result?.warnings ?? [] });
        throw err;
      }
      keepAndLog({
        outcome: answer.outcome,
        incidentId: answer.incidentId,
        rule: result?.matchedRule,
        error: result?.error,
        warnings: result?.warnings ?? [],
        reason: answer.reason,
      });
      return answer;
    },
  };
}

type KeptBody = { body: JsonValue; truncated: boolean };

/**
 * A large body refused before a thread parsed it (its organization's share, or the threads'
 * queue, was full): its first KEPT_BODY_BYTES as text, as a body too large to keep whole is kept.
 */
function unparsedKept(bytes: Uint8Array): KeptBody {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { body: buffer.subarray(0, KEPT_BODY_BYTES).toString("utf8"), truncated: bytes.byteLength > KEPT_BODY_BYTES };
}

/** The most deliveries' records one write takes. */
const MOST_RECORDS_PER_STATEMENT = 100;
/** How long a record waits for others to share its statement. */
const RECORD_WRITE_DELAY_MS = 20;
/** The most records waiting to be written: past it, the oldest are dropped (and counted). */
const MOST_WAITING_RECORDS = 10_000;
/**
 * And the most bytes they hold (their payloads as written): 10,000 kept bodies of 64 KiB would be
 * 640 MiB, past the intake container's memory limit.
 */
const MOST_WAITING_BYTES = 32 * 1024 * 1024;

/**
 * Writes deliveries' kept payloads and log rows after their answers, in groups: a record waits up
 * to RECORD_WRITE_DELAY_MS for others (or until MOST_RECORDS_PER_STATEMENT have come), and they are
 * written together, one group at a time, so a storm costs a write per group rather than a round
 * trip per delivery and no sender waits for its record. `flush()` writes everything waiting: the
 * log and payload reads call it, so what this process answered is there to read, and stopping
 * calls it so nothing waiting is lost. While Postgres cannot keep up, at most MOST_WAITING_RECORDS
 * holding at most MOST_WAITING_BYTES wait; the oldest beyond are dropped and counted, never the
 * delivery.
 */
export function createRecordWriter(store: DeliveryRecordStore, logger: Logger, mostWaiting = MOST_WAITING_RECORDS, mostWaitingBytes = MOST_WAITING_BYTES) {
  let waiting: { record: DeliveryRecord; bytes: number }[] = [];
  let waitingBytes = 0;
  /** Records taken for the statement being written. */
  let inWriting = 0;
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> | undefined;
  // Records ever queued, and ever done with (written, failed or dropped): flush waits by these.
  let queued = 0;
  let done = 0;
  /** When dropping was last logged: at most once every 10 s, however long Postgres lags. */
  let droppingLoggedAt = 0;

  /** Keeps the group's payloads and log rows, else each record's alone (one bad one costs no other its row). */
  async function keepAll(group: DeliveryRecord[]): Promise<void> {
    try {
      await store.keepAndLogMany(group);
    } catch (err) {
      if (group.length === 1) {
        logger.warn({ err: String(err), source: group[0]!.sourceId }, "could not keep a custom-source payload and log row");
        return;
      }
      for (const record of group) await keepAll([record]);
    }
  }

  async function writeGroup(): Promise<void> {
    const group = waiting.splice(0, MOST_RECORDS_PER_STATEMENT);
    for (const taken of group) waitingBytes -= taken.bytes;
    inWriting = group.length;
    await keepAll(group.map((taken) => taken.record));
    inWriting = 0;
    done += group.length;
  }

  /** Starts writing the next group now, or returns the one being written. */
  function writeNext(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    writing ??= writeGroup().finally(() => {
      writing = undefined;
      schedule();
    });
    return writing;
  }

  function schedule(): void {
    if (writing || waiting.length === 0) return;
    // Outside the call that queued the record: the group is written after its answer, and must
    // not be refused for that call's deadline or its sender hanging up.
    outsideCall(() => {
      if (waiting.length >= MOST_RECORDS_PER_STATEMENT) void writeNext();
      else timer ??= setTimeout(() => void writeNext(), RECORD_WRITE_DELAY_MS);
    });
  }

  return {
    write(record: DeliveryRecord): void {
      const bytes = recordBytes(record);
      waiting.push({ record, bytes });
      waitingBytes += bytes;
      queued++;
      let dropped = 0;
      while (waiting.length - dropped > mostWaiting || (waitingBytes > mostWaitingBytes && waiting.length - dropped > 0)) {
        waitingBytes -= waiting[dropped]!.bytes;
        dropped++;
      }
      if (dropped > 0) {
        waiting = waiting.slice(dropped);
        done += dropped;
        customSourceRecordsDropped.inc(dropped);
        if (Date.now() - droppingLoggedAt >= 10_000) {
          droppingLoggedAt = Date.now();
          logger.warn({ waiting: waiting.length, waitingBytes }, "dropping custom-source payloads and log rows: Postgres is not keeping up");
        }
      }
      schedule();
    },

    /** What is held: records waiting and their bytes, and records in the statement being written. */
    waiting(): { records: number; bytes: number; writing: number } {
      return { records: waiting.length, bytes: waitingBytes, writing: inWriting };
    },

    /** Resolves once everything waiting when called is written (or failed, which is logged). */
    async flush(): Promise<void> {
      const until = queued;
      while (done < until) await writeNext();
    },
  };
}

export type RecordWriter = ReturnType<typeof createRecordWriter>;

/** A record's size as written: its payload's JSON and a log row's worth for the rest. */
function recordBytes(record: DeliveryRecord): number {
  return Buffer.byteLength(JSON.stringify(record.payload), "utf8") + 512;
}

/** The attach identity of a custom source's key: never shared with another source's. */
export function customAttachIdentity(sourceId: string, key: string): string {
  return `custom:${sourceId}:${key}`;
}

/** The default incident's identity: a source's unmapped deliveries gather on one open incident. */
export function unmappedAttachIdentity(sourceId: string): string {
  return `custom:${sourceId}:unmapped`;
}

/** The delivery the incident core records for a mapping result. */
export function toMappedDelivery(
  row: CustomSourceRow,
  body: unknown,
  raw: Uint8Array,
  result: MappingResult,
  kept: KeptBody = boundedBody(body, raw.byteLength),
  /** The digest of `raw` when already made (on a worker thread, for a large body). */
  rawDigest?: string,
): MappedDelivery {
  const fields = result.fields;
  if (result.error || !fields) {
    const data: JsonObject = { customSource: row.name, mappingError: result.error ?? "no rule matched", rawPayload: kept.body };
    if (kept.truncated) data.rawPayloadTruncated = true;
    if (result.matchedRule) data.rule = result.matchedRule;
    return toAlertDelivery({
      source: row.name,
      attachIdentity: unmappedAttachIdentity(row.id),
      // The same bytes redelivered are one entry; a different payload is its own.
      eventId: `unmapped:${rawDigest ?? digestOfBytes(raw)}`,
      kind: "alert",
      title: unmappedTitle(row.name),
      severity: "sev3",
      summary: `The mapping failed: ${result.error ?? "no rule matched"}`,
      data,
    });
  }
  if (fields.kind === "ignore") return { outcome: "ignored", reason: fields.ignoreReason ?? "dropped by a rule" };
  const data: JsonObject = { customSource: row.name, rule: result.matchedRule ?? "" };
  if (result.warnings.length > 0) data.warnings = result.warnings;
  return toAlertDelivery({
    source: row.name,
    attachIdentity: fields.attachKey ? customAttachIdentity(row.id, fields.attachKey) : "",
    eventId: fields.eventId,
    kind: fields.kind === "trigger" ? "alert" : fields.kind,
    title: fields.title,
    severity: fields.severity,
    entity: fields.entity,
    summary: fields.summary,
    link: fields.link,
    runbookUrl: fields.runbookUrl,
    data,
  });
}

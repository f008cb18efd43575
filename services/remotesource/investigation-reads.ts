import type { JsonObject } from "@bufbuild/protobuf";
import { CelScalar } from "@bufbuild/cel";
import type { ServiceImpl } from "@connectrpc/connect";
import type { InvestigationRead, RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import type { CapabilitiesResponse, OperationDescriptor } from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { compileMetered, meteredEnvironment, type Program } from "../cel/cel-mapping.js";
import { ADMINS, authorize } from "../runtime/credentials/auth.js";
import { FailedPreconditionError, InvalidArgumentError } from "../runtime/errors.js";
import { recordAudit } from "../runtime/transport/events.js";
import { AUDIT_KINDS, clientFor, connectionsChanged, loadConnection, toRemoteSource } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import type { ConnectionRow } from "./store.js";
import { INVESTIGATION_CALLS, type InvestigationCall, type StoredRead } from "./stored-reads.js";

/**
 * The reads an investigation makes through a connection: stored with the connection, checked
 * against the source's capabilities when saved, their expressions CEL over the incident.
 */

export const READ_LIMITS = {
  readsPerConnection: 20,
  nameCharacters: 100,
  defaultLookbackMinutes: 30,
  maxLookbackMinutes: 1440,
  defaultStepSeconds: 60,
  defaultLogLimit: 100,
  maxLogLimit: 1000,
  /** Cost units one template or condition may spend on one incident. */
  costPerExpression: 5_000,
} as const;

/** What a read's expressions see: `incident`, a map (see the proto's InvestigationRead). */
export const TEMPLATE_ENVIRONMENT = meteredEnvironment({ incident: CelScalar.DYN }, READ_LIMITS.costPerExpression);

/** A duration such as `30s`, `5m`, `1h` or a number of seconds, in seconds; undefined when it is not one. */
export function stepSeconds(step: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(s|m|h)?$/.exec(step.trim());
  if (!match) return undefined;
  const value = Number(match[1]) * (match[2] === "h" ? 3600 : match[2] === "m" ? 60 : 1);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

/** The descriptor that backs a canonical range call of this kind, if the source lists one. */
export function rangeDescriptor(capabilities: CapabilitiesResponse, kind: "metrics" | "logs"): OperationDescriptor | undefined {
  return capabilities.operations.find((o) => o.kind === kind && o.canonical === "range");
}

/** Whether a descriptor is windowed: it backs a range call or declares a window. */
function isWindowed(o: OperationDescriptor): boolean {
  return o.canonical === "range" || o.window !== undefined;
}

/** A read's compiled expressions. */
export interface CompiledRead {
  template?: Program;
  when?: Program;
}

/** Compiles a read's expressions; InvalidArgument naming the field when one does not compile. */
export function compileRead(read: Pick<StoredRead, "template" | "when">, where: string): CompiledRead {
  const compiled: CompiledRead = {};
  if (read.template.trim()) compiled.template = compileMetered(TEMPLATE_ENVIRONMENT, read.template, `${where}.template`);
  if (read.when.trim()) compiled.when = compileMetered(TEMPLATE_ENVIRONMENT, read.when, `${where}.when`);
  return compiled;
}

/**
 * Checks the reads against the source's capabilities and compiles their expressions; answers
 * them as stored. Refusals quote the protocol's rules.
 */
export function validateReads(reads: readonly InvestigationRead[], capabilities: CapabilitiesResponse): StoredRead[] {
  if (reads.length > READ_LIMITS.readsPerConnection) {
    throw new InvalidArgumentError(`reads: at most ${READ_LIMITS.readsPerConnection} per connection (got ${reads.length})`);
  }
  const names = new Set<string>();
  return reads.map((read, index) => {
    const where = `reads[${index}]`;
    const name = read.name.trim();
    if (!name) throw new InvalidArgumentError(`${where}.name required`);
    if (name.length > READ_LIMITS.nameCharacters) throw new InvalidArgumentError(`${where}.name must be at most ${READ_LIMITS.nameCharacters} characters`);
    if (names.has(name)) throw new InvalidArgumentError(`${where}.name: ${JSON.stringify(name)} is used by an earlier read`);
    names.add(name);
    const call = read.call.trim();
    if (!(INVESTIGATION_CALLS as readonly string[]).includes(call)) {
      throw new InvalidArgumentError(`${where}.call must be one of ${INVESTIGATION_CALLS.join(", ")}`);
    }
    const lookbackMinutes = read.lookbackMinutes === 0 ? READ_LIMITS.defaultLookbackMinutes : read.lookbackMinutes;
    if (lookbackMinutes < 1 || lookbackMinutes > READ_LIMITS.maxLookbackMinutes) {
      throw new InvalidArgumentError(`${where}.lookbackMinutes must be between 1 and ${READ_LIMITS.maxLookbackMinutes}`);
    }
    const stored: StoredRead = {
      name,
      call: call as InvestigationCall,
      operation: "",
      template: read.template.trim(),
      when: read.when.trim(),
      lookbackMinutes,
    };
    let descriptor: OperationDescriptor | undefined;
    if (call === "invoke") {
      const operation = read.operation.trim();
      if (!operation) throw new InvalidArgumentError(`${where}.operation required for invoke`);
      descriptor = capabilities.operations.find((o) => o.operation === operation);
      if (!descriptor) {
        throw new InvalidArgumentError(
          `${where}.operation: the source does not advertise ${JSON.stringify(operation)} ("capabilities.operations lists every operation that invoke accepts"); advertised: ${capabilities.operations.map((o) => o.operation).join(", ") || "none"}`,
        );
      }
      stored.operation = operation;
    } else {
      if (read.operation.trim()) throw new InvalidArgumentError(`${where}.operation is only for invoke`);
      const kind = call === "metrics/range" ? "metrics" : "logs";
      if (!capabilities.kinds.includes(kind)) {
        throw new InvalidArgumentError(
          `${where}.call: the source does not declare kind ${kind} ("A source declaring kind ${kind} implements ${kind === "metrics" ? "metrics/list and metrics/range" : "logs/streams and logs/range"}"); use invoke with an advertised operation`,
        );
      }
      descriptor = rangeDescriptor(capabilities, kind);
      if (!stored.template)
        throw new InvalidArgumentError(`${where}.template required: a string expression yielding the ${kind === "metrics" ? "query" : "log query"}`);
    }
    if (descriptor && isWindowed(descriptor) && !descriptor.window) {
      throw new InvalidArgumentError(
        `${where}: ${descriptor.operation} is windowed but the source declares no window for it ("window: WindowSpec, required for a windowed operation"); fix the source's capabilities`,
      );
    }
    if (read.step?.trim()) {
      if (call === "logs/range") throw new InvalidArgumentError(`${where}.step is for metrics/range and windowed operations`);
      const seconds = stepSeconds(read.step);
      if (seconds === undefined) throw new InvalidArgumentError(`${where}.step must be a duration such as 60s, 5m or 1h`);
      const min = descriptor?.window?.minStepSeconds;
      if (min !== undefined && seconds < min) throw new InvalidArgumentError(`${where}.step is below the source's minStepSeconds (${min})`);
      stored.step = read.step.trim();
    }
    if (read.limit !== undefined && read.limit !== 0) {
      if (call !== "logs/range") throw new InvalidArgumentError(`${where}.limit is for logs/range`);
      if (read.limit < 1 || read.limit > READ_LIMITS.maxLogLimit)
        throw new InvalidArgumentError(`${where}.limit must be between 1 and ${READ_LIMITS.maxLogLimit}`);
      stored.limit = read.limit;
    }
    compileRead(stored, where);
    return stored;
  });
}

/** The source's capabilities, or FailedPrecondition saying to test the connection. */
export async function capabilitiesOf(deps: RemoteSourceDeps, row: ConnectionRow, client = clientFor(deps, row)): Promise<CapabilitiesResponse> {
  const outcome = await client.call("capabilities", undefined);
  if (!outcome.ok) {
    throw new FailedPreconditionError(
      `the source's capabilities could not be read (${outcome.failure.message}); reads are checked against them: test the connection and fix it first`,
    );
  }
  return outcome.message as CapabilitiesResponse;
}

/** SetInvestigationReads: an admin replaces a connection's reads. */
export function createInvestigationReadHandlers(deps: RemoteSourceDeps): Pick<ServiceImpl<typeof RemoteSourcesService>, "setInvestigationReads"> {
  return {
    async setInvestigationReads(req, context) {
      const principal = await authorize(deps.clients, context, req.org, ADMINS);
      const row = await loadConnection(deps, principal.orgId, req.id);
      const reads = req.reads.length === 0 ? [] : validateReads(req.reads, await capabilitiesOf(deps, row));
      const updated = await deps.sql.begin(async (tx) => {
        const [saved] = await tx<ConnectionRow[]>`
          update remotesource.connections set investigation_reads = ${tx.json(reads as unknown as JsonObject[])}, updated_at = now()
          where id = ${row.id} and org_id = ${principal.orgId} returning *`;
        await recordAudit(deps.outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.updated,
          actor: principal.email,
          data: { id: row.id, changed: ["investigationReads"], reads: reads.map((r) => r.name) },
        });
        return saved;
      });
      deps.outbox.poke();
      // Before answering: the incident that opens next must not meet a replica that still believes
      // the organization has no investigation read.
      await connectionsChanged(deps, principal.orgId);
      return toRemoteSource(updated ?? (await loadConnection(deps, principal.orgId, req.id)));
    },
  };
}

import { create } from "@bufbuild/protobuf";
import { InvestigationReadSchema, type InvestigationRead } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import type { ConnectionRow } from "./store.js";

/** The calls a read may make: the two canonical windowed reads, or an advertised operation. */
export const INVESTIGATION_CALLS = ["metrics/range", "logs/range", "invoke"] as const;
export type InvestigationCall = (typeof INVESTIGATION_CALLS)[number];

/** A read as stored in `connections.investigation_reads` (JSON). */
export interface StoredRead {
  name: string;
  call: InvestigationCall;
  operation: string;
  template: string;
  when: string;
  lookbackMinutes: number;
  step?: string;
  limit?: number;
}

export function toInvestigationRead(read: StoredRead): InvestigationRead {
  return create(InvestigationReadSchema, {
    name: read.name,
    call: read.call,
    operation: read.operation,
    template: read.template,
    when: read.when,
    lookbackMinutes: read.lookbackMinutes,
    ...(read.step === undefined ? {} : { step: read.step }),
    ...(read.limit === undefined ? {} : { limit: read.limit }),
  });
}

/** The reads stored on a connection row. */
export function storedReads(row: ConnectionRow): StoredRead[] {
  return Array.isArray(row.investigation_reads) ? (row.investigation_reads as StoredRead[]) : [];
}

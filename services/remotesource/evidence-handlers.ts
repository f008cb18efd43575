import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  EvidenceSchema,
  InvestigationSchema,
  ListEvidenceResponseSchema,
  type Investigation,
  type RemoteSourcesService,
} from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { ConflictError, FailedPreconditionError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import type { RemoteSourceDeps } from "./deps.js";
import type { EvidenceRow, InvestigationRow } from "./store.js";

/** Investigations listed with the evidence, newest run first; older ones are still listed. */
const MAX_RUNS_LISTED = 20;

export function toInvestigation(row: InvestigationRow): Investigation {
  return create(InvestigationSchema, {
    incidentId: row.incident_id,
    run: row.run,
    state: row.state,
    ...(row.reason === null ? {} : { reason: row.reason }),
    createdAt: timestampFromDate(row.created_at),
    ...(row.completed_at === null ? {} : { completedAt: timestampFromDate(row.completed_at) }),
    ...(row.runbook_url === null ? {} : { runbookUrl: row.runbook_url }),
  });
}

/** ListEvidence and Investigate: a member reads an incident's evidence or runs its investigation again. */
export function createEvidenceHandlers(
  deps: RemoteSourceDeps & { pokeInvestigator(): void },
): Pick<ServiceImpl<typeof RemoteSourcesService>, "listEvidence" | "investigate"> {
  const { sql, clients } = deps;

  async function incidentOf(orgId: string, id: string) {
    if (!isUuid(id)) throw new NotFoundError("no such incident");
    const answer = await clients.incidents.incidentState({ orgId, incidentId: id, withIncident: true });
    if (!answer.state || !answer.incident) throw new NotFoundError("no such incident");
    return answer;
  }

  return {
    async listEvidence(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { incident } = await incidentOf(principal.orgId, req.id);
      const investigations = await sql<InvestigationRow[]>`
        select * from remotesource.investigations where org_id = ${principal.orgId} and incident_id = ${req.id}
        order by run desc limit ${MAX_RUNS_LISTED}`;
      const runs = investigations.map((i) => i.run);
      const evidence =
        runs.length === 0
          ? []
          : await sql<EvidenceRow[]>`
              select * from remotesource.evidence where org_id = ${principal.orgId} and incident_id = ${req.id} and run = any(${runs}::int[])
              order by run desc, position`;
      return create(ListEvidenceResponseSchema, {
        investigations: investigations.map(toInvestigation),
        evidence: evidence.map((row) =>
          create(EvidenceSchema, {
            run: row.run,
            connectionId: row.connection_id,
            connectionName: row.connection_name,
            readName: row.read_name,
            call: row.call,
            operation: row.operation,
            params: (row.params ?? {}) as JsonObject,
            fetchedAt: row.fetched_at,
            partial: row.partial,
            ...(row.error === null ? {} : { error: row.error }),
            series: (row.series ?? []) as never,
            entries: (row.entries ?? []) as never,
            raw: row.raw,
            rawCut: row.raw_cut,
            fromMs: BigInt(row.from_ms ?? 0),
            toMs: BigInt(row.to_ms ?? 0),
            recordedAt: timestampFromDate(row.recorded_at),
          }),
        ),
        ...(incident?.openedAt ? { openedAt: incident.openedAt } : {}),
      });
    },

    async investigate(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { state } = await incidentOf(principal.orgId, req.id);
      if (state !== "open") throw new FailedPreconditionError(`the incident is ${state}; only an open incident is investigated`);
      const [configured] = await sql<{ any: boolean }[]>`
        select exists (select 1 from remotesource.connections where org_id = ${principal.orgId} and investigation_reads <> '[]'::jsonb) as any`;
      if (!configured?.any) {
        throw new FailedPreconditionError(
          "no remote source has investigation reads: an admin adds them with PUT /o/{org}/remote-sources/{id}/investigation-reads",
        );
      }
      // One in progress at a time: asking again while one is pending or running answers that one.
      const [inProgress] = await sql<InvestigationRow[]>`
        select * from remotesource.investigations
        where org_id = ${principal.orgId} and incident_id = ${req.id} and state in ('pending', 'running') order by run desc limit 1`;
      if (inProgress) return toInvestigation(inProgress);
      let row: InvestigationRow | undefined;
      try {
        [row] = await sql<InvestigationRow[]>`
          insert into remotesource.investigations (org_id, incident_id, run, requested_by)
          select ${principal.orgId}, ${req.id}, coalesce(max(run), 0) + 1, ${principal.email}
          from remotesource.investigations where org_id = ${principal.orgId} and incident_id = ${req.id}
          returning *`;
      } catch (err) {
        if ((err as { code?: string }).code === "23505")
          throw new ConflictError("an investigation of this incident was requested at the same moment; read its evidence");
        throw err;
      }
      deps.pokeInvestigator();
      return toInvestigation(row!);
    },
  };
}

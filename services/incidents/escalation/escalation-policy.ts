import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  EscalationDeadlineSchema,
  EscalationPolicySchema,
  GetEscalationPolicyRequest,
  IncidentsService,
  PutEscalationPolicyRequest,
} from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../../runtime/credentials/auth.js";
import type { Sql } from "../../runtime/data/database.js";
import { currentTraceparent } from "../../runtime/observability/tracing.js";
import type { IncidentsDeps } from "../deps.js";
import { outboxRows } from "../domain-events.js";
import type { ClockRow } from "../store.js";
import { checkEscalationPolicy, type EscalationSteps } from "../../domain/escalation-rules.js";
import { AUDIT_KINDS } from "../../domain/vocabulary.js";

interface PolicyRow {
  severity: string;
  minutes: number[];
  updated_at: Date;
  updated_by: string;
}

/** The organization's policy as stored, sev1 first. */
export async function readEscalationPolicy(sql: Sql, orgId: string): Promise<MessageInitShape<typeof EscalationPolicySchema>> {
  const rows = await sql<PolicyRow[]>`
    select severity, minutes, updated_at, updated_by from incidents.escalation_policies where org_id = ${orgId} order by severity`;
  const latest = rows.reduce<PolicyRow | undefined>((a, r) => (!a || r.updated_at > a.updated_at ? r : a), undefined);
  return {
    severities: rows.map((r) => ({ severity: r.severity, minutes: r.minutes })),
    ...(latest ? { updatedAt: timestampFromDate(latest.updated_at), updatedBy: latest.updated_by } : {}),
  };
}

/**
 * Replaces an organization's policy in one statement (every severity at once, so two concurrent
 * writers leave one of the two whole policies), with its audit record when anything changed.
 * Answers whether it changed.
 */
export async function writeEscalationPolicy(sql: Sql, change: { orgId: string; actor: string; severities: EscalationSteps[]; at: Date }): Promise<boolean> {
  const audit = outboxRows.audit({
    orgId: change.orgId,
    kind: AUDIT_KINDS.escalationPolicyChanged,
    actor: change.actor,
    at: change.at,
    data: { severities: change.severities.map((s) => ({ severity: s.severity, minutes: s.minutes })) },
  });
  const severities = change.severities.map((s) => s.severity);
  // Arrays of arrays do not pass as parameters; each severity's minutes travel as one text.
  const minutes = change.severities.map((s) => `{${s.minutes.join(",")}}`);
  const [result] = await sql<{ changed: boolean }[]>`
    with wanted as (
      select w.severity, w.minutes::int[] as minutes from unnest(${severities}::text[], ${minutes}::text[]) as w(severity, minutes)
    ), removed as (
      delete from incidents.escalation_policies p
      where p.org_id = ${change.orgId} and p.severity not in (select severity from wanted)
      returning 1
    ), written as (
      insert into incidents.escalation_policies (org_id, severity, minutes, updated_at, updated_by)
      select ${change.orgId}, severity, minutes, ${change.at}::timestamptz, ${change.actor} from wanted
      on conflict (org_id, severity) do update set minutes = excluded.minutes, updated_at = excluded.updated_at, updated_by = excluded.updated_by
      where incidents.escalation_policies.minutes is distinct from excluded.minutes
      returning 1
    ), audit as (
      insert into incidents.outbox (subject, payload, trace_context)
      select ${audit.subject}::text, ${audit.payload}::bytea, ${currentTraceparent()}::text
      where exists (select 1 from removed) or exists (select 1 from written)
    )
    select exists (select 1 from removed) or exists (select 1 from written) as changed`;
  return result!.changed;
}

export type EscalationDeadlineInit = MessageInitShape<typeof EscalationDeadlineSchema>;

/** An incident's next deadline: the first step after the last one passed, while it is open and unacknowledged. */
export async function nextEscalation(sql: Sql, incidentId: string): Promise<EscalationDeadlineInit | undefined> {
  const [row] = await sql<{ step: number; steps: number; minutes: number; due_at: Date }[]>`
    select s.step::int, cardinality(p.minutes)::int as steps, s.minutes, i.opened_at + make_interval(mins => s.minutes) as due_at
    from incidents.incidents i
    join incidents.escalation_policies p on p.org_id = i.org_id and p.severity = i.severity
    cross join lateral unnest(p.minutes) with ordinality as s(minutes, step)
    where i.id = ${incidentId} and i.state = 'open' and i.acknowledged_at is null
      and s.step > coalesce((select max(e.step) from incidents.escalation_steps e where e.incident_id = i.id), 0)
    order by s.step limit 1`;
  return row ? { step: row.step, steps: row.steps, minutes: row.minutes, dueAt: timestampFromDate(row.due_at) } : undefined;
}

/** GET and PUT /o/{org}/escalation: any member reads, owners and admins change. */
export function createEscalationPolicyHandlers(
  deps: Pick<IncidentsDeps, "sql" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "getEscalationPolicy" | "putEscalationPolicy"> {
  const { sql, clients, outbox } = deps;
  return {
    async getEscalationPolicy(req: GetEscalationPolicyRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return readEscalationPolicy(sql, principal.orgId);
    },
    async putEscalationPolicy(req: PutEscalationPolicyRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const severities = checkEscalationPolicy(req.severities);
      const [clock] = await sql<ClockRow[]>`select now() as now`;
      if (await writeEscalationPolicy(sql, { orgId: principal.orgId, actor: principal.email, severities, at: clock!.now })) outbox.poke();
      return readEscalationPolicy(sql, principal.orgId);
    },
  };
}

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { ConformanceReportSchema, type RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { ADMINS, authorize } from "../runtime/credentials/auth.js";
import { recordAudit } from "../runtime/transport/events.js";
import { runConformanceCheck, type CheckResult } from "../remotesource-kit/conformance.js";
import { AUDIT_KINDS, clientFor, loadConnection, recordStatus } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";

/** Test connection: the conformance check against the source, kept as the connection's status. */
export function createTestHandlers(deps: RemoteSourceDeps): Pick<ServiceImpl<typeof RemoteSourcesService>, "testRemoteSource"> {
  const { sql, clients } = deps;

  return {
    async testRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const row = await loadConnection(deps, principal.orgId, req.id);
      const result = await runConformanceCheck(clientFor(deps, row));
      const failed = result.checks.filter((c) => !c.ok);
      const lastError = failed.length === 0 ? null : summarize(failed.map((c) => `${c.name}: ${c.detail}`).join("; "));
      await recordStatus(deps, row, result.ok ? "connected" : "failed", lastError, { tested: true });
      await sql.begin((tx) =>
        recordAudit(deps.outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.tested,
          actor: principal.email,
          data: { id: row.id, ok: result.ok, failed: failed.map((c) => c.name) },
        }),
      );
      deps.outbox.poke();
      // The report keeps its shape {name, ok, detail}; the rule a failing check applies and any
      // warning are written into its detail.
      return create(ConformanceReportSchema, { ...result, checks: result.checks.map((c) => ({ name: c.name, ok: c.ok, detail: reportDetail(c) })) });
    },
  };
}

/** A check's detail as the report shows it, with its rule and warnings. */
export function reportDetail(check: CheckResult): string {
  const parts = [check.detail];
  if (check.rule) parts.push(`rule: "${check.rule}"`);
  for (const warning of check.warnings) parts.push(`warning: ${warning}`);
  return parts.join("; ");
}

const LAST_ERROR_MAX = 1000;

function summarize(text: string): string {
  return text.length <= LAST_ERROR_MAX ? text : `${text.slice(0, LAST_ERROR_MAX - 1)}…`;
}

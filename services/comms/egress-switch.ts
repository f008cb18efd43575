import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import type { Sql } from "../runtime/database.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/auth.js";
import { recordAudit } from "../runtime/events.js";
import { AUDIT_KINDS, type CommsDeps } from "./deps.js";
import type { EgressSettingRow } from "./store.js";

/** Whether real egress is on for the organization: off unless an admin switched it on. */
export async function egressEnabled(sql: Sql, orgId: string): Promise<boolean> {
  const [row] = await sql<EgressSettingRow[]>`select enabled from comms.egress_settings where org_id = ${orgId}`;
  return row?.enabled ?? false;
}

/** The per-organization switch; it covers every chat connection of the organization. */
export function createEgressSwitchHandlers(deps: CommsDeps): Pick<ServiceImpl<typeof CommsService>, "setEgress" | "getEgress"> {
  const { sql, clients, outbox } = deps;
  return {
    async setEgress(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await sql.begin(async (tx) => {
        const [previous] = await tx<EgressSettingRow[]>`select enabled from comms.egress_settings where org_id = ${principal.orgId} for update`;
        await tx`
          insert into comms.egress_settings (org_id, enabled, changed_by) values (${principal.orgId}, ${req.enabled}, ${principal.email})
          on conflict (org_id) do update set enabled = excluded.enabled, changed_by = excluded.changed_by, changed_at = now()`;
        await recordAudit(deps.outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.egressSwitched,
          actor: principal.email,
          data: {
            enabled: req.enabled,
            previous: previous?.enabled ?? false,
          },
        });
      });
      outbox.poke();
      return { enabled: req.enabled };
    },

    async getEgress(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return { enabled: await egressEnabled(sql, principal.orgId) };
    },
  };
}

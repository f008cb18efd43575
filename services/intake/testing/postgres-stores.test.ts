import { fromBinary, type JsonObject } from "@bufbuild/protobuf";
import postgres from "postgres";
import { afterAll, beforeAll } from "vitest";
import { AuditRecordedSchema } from "../../../gen/warroom/events/v1/events_pb.js";
import { freshDatabase } from "../../../test/support/app.js";
import { migrate } from "../../runtime/data/migrations.js";
import { createOutboxRelay } from "../../runtime/data/outbox.js";
import { createLogger } from "../../runtime/observability/logger.js";
import { createInMemoryEventBus } from "../../runtime/transport/event-bus.js";
import { EVENTS } from "../../runtime/transport/events.js";
import { createPostgresConfigStore } from "../config-as-code/store.js";
import { createPostgresCustomSourceStore } from "../custom-sources/store.js";
import { createPostgresGroupingStore } from "../grouping/store.js";
import { migrations } from "../migrations.js";
import { describeStoreContract } from "./store-contract.js";

// The stores' contract against the Postgres stores, on a database of this file's own with intake's
// migrations applied (memory-stores.unit.test.ts runs it against the memory stores). The audit
// records are read back from the outbox they were written to; the relay is never started.

let database: Awaited<ReturnType<typeof freshDatabase>>;
let sql: postgres.Sql;

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 4, onnotice: () => {} });
  await migrate(sql, "intake", migrations);
});

afterAll(async () => {
  await sql?.end();
  await database?.drop();
});

describeStoreContract("Postgres", () => {
  const logger = createLogger("silent", "postgres-stores");
  const outbox = createOutboxRelay({ sql, schema: "intake", bus: createInMemoryEventBus(logger), logger });
  return {
    customSources: createPostgresCustomSourceStore(sql, outbox),
    grouping: createPostgresGroupingStore(sql, outbox),
    config: createPostgresConfigStore(sql, outbox),
    async audits(orgId) {
      const rows = await sql<{ payload: Buffer }[]>`select payload from intake.outbox where subject = ${EVENTS.auditRecorded.subject} order by seq`;
      return rows
        .map((row) => fromBinary(AuditRecordedSchema, row.payload))
        .filter((a) => a.orgId === orgId)
        .map((a) => ({ orgId: a.orgId, kind: a.kind, actor: a.actor, data: (a.data ?? {}) as JsonObject }));
    },
  };
});

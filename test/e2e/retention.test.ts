import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groupingGenerationRetention } from "../../services/intake/grouping/generation-retention.js";
import { investigationRetention } from "../../services/remotesource/retention.js";
import { sweepRetention } from "../../services/runtime/data/retention-sweep.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * The retention sweeps over the schema the service migrated, on a real Postgres: rows past their
 * retention go, recent ones stay, and two replicas sweeping at once neither fail nor wait for
 * each other.
 */

let app: TestApp;
let replicaA: postgres.Sql;
let replicaB: postgres.Sql;

beforeAll(async () => {
  app = await startApp();
  replicaA = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  replicaB = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
});

afterAll(async () => {
  await replicaA?.end();
  await replicaB?.end();
  await app?.stop();
});

const DAYS = 90;

async function insertRun(orgId: string, incidentId: string, run: number, state: string, ageDays: number): Promise<void> {
  await replicaA`
    insert into remotesource.investigations (org_id, incident_id, run, state, requested_by, created_at, completed_at)
    values (${orgId}, ${incidentId}, ${run}, ${state}, 'test', now() - make_interval(days => ${ageDays}),
      ${state === "pending" || state === "running" ? null : replicaA`now() - make_interval(days => ${ageDays})`})`;
}

async function insertEvidence(orgId: string, incidentId: string, run: number, readKey: string, ageDays: number): Promise<void> {
  await replicaA`
    insert into remotesource.evidence (org_id, incident_id, run, read_key, position, connection_id, connection_name, read_name, call, operation,
      fetched_at, partial, raw, raw_cut, recorded_at)
    values (${orgId}, ${incidentId}, ${run}, ${readKey}, 0, ${randomUUID()}, 'c', 'r', 'metrics/range', 'metrics/range',
      '2024-05-01T12:00:00Z', false, ${"x".repeat(1000)}, false, now() - make_interval(days => ${ageDays}))`;
}

describe("retention", () => {
  it("deletes evidence and settled runs past INVESTIGATION_RETENTION_DAYS, keeping recent ones, running ones and each incident's newest run", async () => {
    const org = randomUUID();
    const [old, recent, running] = [randomUUID(), randomUUID(), randomUUID()];
    await insertRun(org, old, 1, "done", 120);
    await insertRun(org, old, 2, "failed", 100);
    await insertRun(org, old, 3, "skipped", 95);
    await insertRun(org, recent, 1, "done", 10);
    await insertRun(org, running, 1, "running", 100);
    for (let i = 0; i < 7; i++) await insertEvidence(org, old, 1 + (i % 3), `old-${i}`, 100 + i);
    await insertEvidence(org, recent, 1, "recent", 10);

    // Two replicas at once, in batches of 2 rows: each takes rows the other has not locked.
    const rules = investigationRetention(DAYS);
    const [a, b] = await Promise.all([sweepRetention(replicaA, rules, { batchRows: 2 }), sweepRetention(replicaB, rules, { batchRows: 2 })]);
    expect(a["remotesource.evidence"]! + b["remotesource.evidence"]!).toBe(7);
    expect(a["remotesource.investigations"]! + b["remotesource.investigations"]!).toBe(2);

    const runs = await replicaA<{ incident_id: string; run: number; state: string }[]>`
      select incident_id, run, state from remotesource.investigations where org_id = ${org} order by incident_id, run`;
    expect(runs.map((r) => [r.incident_id, r.run, r.state]).sort()).toEqual(
      [
        [old, 3, "skipped"],
        [recent, 1, "done"],
        [running, 1, "running"],
      ].sort(),
    );
    const evidence = await replicaA<{ read_key: string }[]>`select read_key from remotesource.evidence where org_id = ${org}`;
    expect(evidence.map((e) => e.read_key)).toEqual(["recent"]);

    // Nothing left past its retention: a second sweep deletes nothing.
    const again = await sweepRetention(replicaA, rules);
    expect(again).toEqual({ "remotesource.evidence": 0, "remotesource.investigations": 0 });
  });

  it("forgets grouping generations no delivery has used for GROUPING_GENERATION_RETENTION_DAYS", async () => {
    const org = randomUUID();
    for (let i = 0; i < 5; i++) {
      await replicaA`
        insert into intake.grouping_generations (org_id, identity, generation, seen_at)
        values (${org}, ${`stale-${i}`}, 3, now() - make_interval(days => ${DAYS + 1 + i}))`;
    }
    await replicaA`insert into intake.grouping_generations (org_id, identity, generation, seen_at) values (${org}, 'in-use', 2, now() - interval '10 days')`;
    await replicaA`insert into intake.grouping_generations (org_id, identity, generation) values (${org}, 'new', 1)`;

    const rules = groupingGenerationRetention(DAYS);
    const [a, b] = await Promise.all([sweepRetention(replicaA, rules, { batchRows: 2 }), sweepRetention(replicaB, rules, { batchRows: 2 })]);
    expect(a["intake.grouping_generations"]! + b["intake.grouping_generations"]!).toBe(5);
    const left = await replicaA<{ identity: string }[]>`select identity from intake.grouping_generations where org_id = ${org} order by identity`;
    expect(left.map((r) => r.identity)).toEqual(["in-use", "new"]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LARGE_BODY_BYTES } from "../../services/intake/custom-sources/large-bodies.js";
import { OWNER } from "../support/app.js";
import { getIncident, MODES, startIntakeApp, unique, type IntakeApp } from "./triggers-kit.js";

/**
 * A custom-source body over LARGE_BODY_BYTES is parsed, kept and mapped on a worker thread
 * (services/intake/custom-sources/large-bodies.ts), so the event loop every organization's
 * deliveries wait on only hands its bytes over. Every answer must be the one the event loop gives a
 * small body: the mapped incident, the default incident, a body nested too deeply, an
 * Idempotency-Key's retry and reuse, a grouping override's key, the kept payload and the log.
 */

/** About 200 KB of padding the rules never read: ten strings, each within the 64 KiB rules read. */
const PADDING = Array.from({ length: 10 }, (_, i) => `${i} ${"pad ".repeat(5_000)}`);

const large = (fields: Record<string, unknown>) => {
  const body = JSON.stringify({ ...fields, padding: PADDING });
  expect(Buffer.byteLength(body)).toBeGreaterThan(LARGE_BODY_BYTES);
  return body;
};

/** JSON nested `depth` levels deep, padded past LARGE_BODY_BYTES when `padded`. */
const deep = (depth: number, padded: boolean) => `{"padding":${padded ? JSON.stringify(PADDING) : "[]"},"d":${"[".repeat(depth)}${"]".repeat(depth)}}`;

describe.each(MODES)("custom-source bodies over 64 KiB (%s)", (mode) => {
  let app: IntakeApp;
  let owner: string;

  beforeAll(async () => {
    app = await startIntakeApp(mode);
    owner = await app.ownerToken();
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  async function createSource(rules: Record<string, string>[]): Promise<{ id: string; secret: string; name: string }> {
    const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: owner, body: { name: unique("large").toLowerCase(), rules } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { id: res.body.source.id, secret: res.body.credential.secret, name: res.body.source.name };
  }

  function deliver(source: { id: string; secret: string }, raw: string, headers: Record<string, string> = {}) {
    return app.call("POST", `/triggers/custom/${source.id}`, {
      raw,
      headers: { "content-type": "application/json", authorization: `Bearer ${source.secret}`, ...headers },
    });
  }

  /** The source's delivery log and kept payloads, newest first, once they hold `count` rows. */
  async function recorded(id: string, count: number): Promise<{ deliveries: any[]; payloads: any[] }> {
    for (let read = 1; ; read++) {
      const deliveries = (await app.call("GET", `/o/${OWNER.org}/custom-sources/${id}/deliveries`, { token: owner })).body.deliveries as any[];
      const payloads = (await app.call("GET", `/o/${OWNER.org}/custom-sources/${id}/payloads`, { token: owner })).body.payloads as any[];
      if (deliveries.length >= count && payloads.length >= count) return { deliveries, payloads };
      // Another intake replica's rows are written a few tens of milliseconds after its answer.
      expect(mode, `${deliveries.length} of ${count} rows on read ${read}`).not.toBe("one process");
      expect(read).toBeLessThan(100);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it("maps a large body with the source's rules, attaches by its key, and keeps its first 64 KiB with the log row", async () => {
    const source = await createSource([{ name: "main", title: "body.title", attachKey: "body.host", severity: "'sev2'" }]);
    const host = unique("host");
    const opened = await deliver(source, large({ title: "Disk full on db-1", host }));
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body).toMatchObject({ outcome: "opened", proposedSeverity: "sev2" });
    const attached = await deliver(source, large({ title: "Disk still full on db-1", host }));
    expect(attached.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    expect((await getIncident(app, owner, opened.body.incidentId)).title).toBe("Disk full on db-1");

    const { deliveries, payloads } = await recorded(source.id, 2);
    expect(deliveries.map((d) => [d.outcome, d.rule])).toEqual([
      ["attached", "main"],
      ["opened", "main"],
    ]);
    expect(payloads[0].truncated).toBe(true);
    expect(typeof payloads[0].body).toBe("string");
    expect(payloads[0].body).toMatch(/^\{"title":"Disk still full on db-1"/);
  });

  it("opens the default incident for a large body its rules cannot map, once per distinct body", async () => {
    const source = await createSource([{ name: "main", title: "body.count" }]);
    const raw = large({ count: 3 });
    const first = await deliver(source, raw);
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    const incident = await getIncident(app, owner, first.body.incidentId);
    expect(incident.title).toBe(`Unmapped alert from ${source.name}`);
    expect(incident.timeline[0].data).toMatchObject({ mappingError: 'rule "main": title yielded double, not a string', rawPayloadTruncated: true });
    // The same bytes again are the same entry; other bytes are an entry of their own.
    const again = await deliver(source, raw);
    expect(again.body.incidentId).toBe(first.body.incidentId);
    const other = await deliver(source, large({ count: 4 }));
    expect(other.body.incidentId).toBe(first.body.incidentId);
    expect((await getIncident(app, owner, first.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
  });

  it("refuses a large body nested too deeply as it refuses a small one, keeping nothing", async () => {
    const source = await createSource([{ name: "main", title: "'t'" }]);
    const small = await deliver(source, deep(70, false));
    const big = await deliver(source, deep(70, true));
    expect(small.status).toBe(422);
    expect(big.status).toBe(422);
    expect(big.body).toEqual(small.body);
    expect((await app.call("GET", `/o/${OWNER.org}/custom-sources/${source.id}/deliveries`, { token: owner })).body.deliveries).toEqual([]);
  });

  it("answers a retry with the same Idempotency-Key and large body as the first, and refuses the key with another body", async () => {
    const source = await createSource([{ name: "main", title: "body.title" }]);
    const key = { "idempotency-key": unique("key") };
    const first = await deliver(source, large({ title: "Backup failed" }), key);
    expect(first.body).toMatchObject({ outcome: "opened" });
    const retried = await deliver(source, large({ title: "Backup failed" }), key);
    expect(retried.body).toMatchObject({ outcome: "opened", incidentId: first.body.incidentId });
    const reused = await deliver(source, large({ title: "Backup failed again" }), key);
    expect(reused.status).toBe(422);
    expect(JSON.stringify(reused.body)).toContain("was already used with a different body");
  });

  it("groups large bodies by the organization's override for the source", async () => {
    const source = await createSource([{ name: "main", title: "body.title", attachKey: "body.host" }]);
    const put = await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/${source.name}`, { token: owner, body: { attachKey: "body.cluster" } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const cluster = unique("cluster");
    const a = await deliver(source, large({ title: "Node a down", host: unique("a"), cluster }));
    const b = await deliver(source, large({ title: "Node b down", host: unique("b"), cluster }));
    expect(a.body.outcome).toBe("opened");
    expect(b.body).toMatchObject({ outcome: "attached", incidentId: a.body.incidentId });
    expect((await app.call("DELETE", `/o/${OWNER.org}/grouping-overrides/${source.name}`, { token: owner })).status).toBe(204);
  });
});

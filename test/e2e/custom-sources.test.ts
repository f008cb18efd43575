import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { OWNER } from "../support/app.js";
import { nodeArgsFor } from "../support/compiled-services.js";
import {
  auditEvents,
  bootstrapOrg,
  fixture,
  duringMaintenance,
  getIncident,
  type IntakeApp,
  listIncidents,
  MODES,
  postTrigger,
  PUBLIC_URL,
  startIntakeApp,
  unique,
  UUID,
} from "./triggers-kit.js";

/**
 * Custom sources end to end over HTTP, in one process and as separate processes over NATS: an
 * admin saves a source with CEL rules, its sender posts with the source's own credential, and
 * every delivery lands through the same incident core as the built-in sources, or (when the
 * mapping fails) on the source's default incident with the raw payload.
 */

const ZABBIX_RULES = [
  { name: "maintenance", when: "body.status == 'MAINTENANCE'", kind: "'ignore'", ignoreReason: "'host in maintenance'" },
  {
    name: "problem",
    when: "body.status == 'PROBLEM'",
    title: "body.name",
    severity: "body.severity == 'Disaster' ? 'sev1' : 'sev3'",
    attachKey: "body.host + '/' + body.trigger",
    eventId: "body.eventid",
    entity: "{'kind': 'host', 'id': body.host}",
    summary: "'Zabbix: ' + body.name + ' on ' + body.host",
    link: "'https://zabbix.example.com/tr_events.php?eventid=' + body.eventid",
  },
  { name: "resolved", when: "body.status == 'RESOLVED'", kind: "'recovery'", attachKey: "body.host + '/' + body.trigger", eventId: "'r' + body.eventid" },
];

describe.each(MODES)("custom sources (%s)", (mode) => {
  let app: IntakeApp;
  let owner: string;

  beforeAll(async () => {
    // Behind a trusted proxy, so that refusals can come from addresses of their own: failed
    // credentials are limited per address, and the refusal checks below send more than the limit.
    app = await startIntakeApp(mode, { intakes: 2, env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
    owner = await app.ownerToken();
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  async function createSource(body: Record<string, unknown>): Promise<{ id: string; secret: string; url: string; pathUrl: string | null; name: string }> {
    const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: owner, body });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return {
      id: res.body.source.id,
      secret: res.body.credential.secret,
      url: res.body.credential.url,
      pathUrl: res.body.credential.pathUrl,
      name: res.body.source.name,
    };
  }

  function post(path: string, body: unknown, headers: Record<string, string> = {}) {
    const raw = typeof body === "string" ? body : JSON.stringify(body);
    return app.call("POST", path, { raw, headers: { "content-type": "application/json", ...headers } });
  }

  function deliver(source: { id: string; secret: string }, body: unknown, headers: Record<string, string> = {}) {
    return post(`/triggers/custom/${source.id}`, body, { authorization: `Bearer ${source.secret}`, ...headers });
  }

  /**
   * Deliveries enough that every intake replica (two, taking requests at random) served some: the
   * chance that one served none of 16 is 2 × 2⁻¹⁶.
   */
  const WARM_EVERY_REPLICA = 16;

  let nextAddress = 0;

  /**
   * The statuses of `n` deliveries of an empty body, one after another, each from an address of
   * its own (so a refusal is the credential's, never the per-address failure limit's).
   */
  async function statusesOf(source: { id: string; secret: string }, n: number): Promise<number[]> {
    const statuses: number[] = [];
    for (let i = 0; i < n; i++) {
      const address = `198.51.100.${nextAddress++ % 250}`;
      statuses.push((await deliver(source, {}, { "x-forwarded-for": address })).status);
    }
    return statuses;
  }

  /**
   * A source's delivery log or kept payloads once they hold `count` rows. The process that answered
   * a delivery shows its rows at once; another intake replica once they are written, a few tens
   * of milliseconds later (README, "Any other tool: custom sources"). So in one process the first
   * read must already show them.
   */
  /** The source's rows once there are `count` of them and `complete` (when given) holds for them. */
  async function recorded(id: string, what: "deliveries" | "payloads", count: number, complete?: (rows: any[]) => boolean): Promise<any[]> {
    for (let read = 1; ; read++) {
      const res = await app.call("GET", `/o/${OWNER.org}/custom-sources/${id}/${what}`, { token: owner });
      expect(res.status).toBe(200);
      const rows = res.body[what] as any[];
      if (rows.length >= count && (!complete || complete(rows))) return rows;
      expect(mode, `${rows.length} of ${count} ${what} (or not complete) on read ${read}`).not.toBe("one process");
      expect(read, `${rows.length} of ${count} ${what} after ${read} reads`).toBeLessThan(100);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  const log = (id: string, count: number) => recorded(id, "deliveries", count);

  it("scopes an Idempotency-Key to its source: the same key on another source is another delivery", async () => {
    const rules = [{ name: "every", when: "true", title: "body.name" }];
    const first = await createSource({ name: unique("scripts-a").toLowerCase(), rules });
    const second = await createSource({ name: unique("scripts-b").toLowerCase(), rules });
    const key = { "idempotency-key": unique("key") };
    const opened = await deliver(first, { name: "Backup failed" }, key);
    expect(opened.body, JSON.stringify(opened.body)).toMatchObject({ outcome: "opened" });
    // The sender's retry gets the first answer back, and nothing more is recorded.
    const retried = await deliver(first, { name: "Backup failed" }, key);
    expect(retried.body).toMatchObject({ outcome: "opened", incidentId: opened.body.incidentId });
    // The same key on another source names that source's own delivery.
    const other = await deliver(second, { name: "Backup failed" }, key);
    expect(other.body).toMatchObject({ outcome: "opened" });
    expect(other.body.incidentId).not.toBe(opened.body.incidentId);
    const incident = await getIncident(app, owner, opened.body.incidentId);
    expect(incident.timeline.map((e: any) => e.kind)).toEqual(["opened"]);
  });

  it("opens, attaches, records and drops through the incident core, with the source's name as the badge", async () => {
    const name = unique("zabbix").toLowerCase();
    const source = await createSource({ name, rules: ZABBIX_RULES });
    expect(source.url).toBe(`${PUBLIC_URL}/triggers/custom/${source.id}`);
    expect(source.secret).toMatch(/^[0-9a-f]{64}$/);

    const problem = { status: "PROBLEM", name: "Disk full", severity: "Disaster", host: "db1", trigger: "disk", eventid: "101" };
    const opened = await deliver(source, problem);
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body).toMatchObject({ outcome: "opened", proposedSeverity: "sev1", entity: { kind: "host", id: "db1" } });
    const incident = await getIncident(app, owner, opened.body.incidentId);
    expect(incident).toMatchObject({ title: "Disk full", severity: "sev1", source: name, entity: { kind: "host", id: "db1" } });
    expect(incident.timeline[0]).toMatchObject({
      kind: "opened",
      summary: "Zabbix: Disk full on db1",
      link: "https://zabbix.example.com/tr_events.php?eventid=101",
    });

    // A redelivery of the same event is one entry; a new event on the same trigger is a repeat.
    const again = await deliver(source, problem);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    const repeat = await deliver(source, { ...problem, eventid: "102" });
    expect(repeat.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    const recovery = await deliver(source, { status: "RESOLVED", host: "db1", trigger: "disk", eventid: "102" });
    expect(recovery.body).toMatchObject({ outcome: "recorded", incidentId: opened.body.incidentId });
    const after = await getIncident(app, owner, opened.body.incidentId);
    expect(after.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "recovery"]);
    // A recovery never rewrites the title.
    expect(after.title).toBe("Disk full");

    const dropped = await deliver(source, { status: "MAINTENANCE" });
    expect(dropped.status).toBe(200);
    expect(dropped.body).toMatchObject({ outcome: "ignored", reason: "host in maintenance" });

    const entries = await log(source.id, 5);
    expect(entries.map((e) => [e.outcome, e.rule ?? null])).toEqual([
      ["ignored", "maintenance"],
      ["recorded", "resolved"],
      ["attached", "problem"],
      ["attached", "problem"],
      ["opened", "problem"],
    ]);
    expect(entries[4].incidentId).toBe(opened.body.incidentId);
  });

  it("opens the default incident with the raw payload when a rule fails, and logs the error", async () => {
    const name = unique("script").toLowerCase();
    const source = await createSource({ name, rules: [{ name: "main", title: "body.count", attachKey: "'k'" }] });
    const payload = { count: 3, note: "not a title" };
    const res = await deliver(source, payload);
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ outcome: "opened", proposedSeverity: "sev3" });
    const incident = await getIncident(app, owner, res.body.incidentId);
    expect(incident).toMatchObject({ title: `Unmapped alert from ${name}`, severity: "sev3", source: name });
    expect(incident.timeline[0].summary).toBe('The mapping failed: rule "main": title yielded double, not a string');
    expect(incident.timeline[0].data).toMatchObject({
      customSource: name,
      mappingError: 'rule "main": title yielded double, not a string',
      rawPayload: payload,
    });

    // A body that is not JSON at all is kept as text, never refused.
    const text = await deliver(source, "disk full on db2", { "content-type": "text/plain" });
    expect(text.body).toMatchObject({ outcome: "attached", incidentId: res.body.incidentId });
    const after = await getIncident(app, owner, res.body.incidentId);
    expect(after.timeline[1].data.rawPayload).toBe("disk full on db2");

    const entries = await log(source.id, 2);
    expect(entries[1]).toMatchObject({
      outcome: "opened",
      incidentId: res.body.incidentId,
      rule: "main",
      error: 'rule "main": title yielded double, not a string',
    });
    expect(entries[0].error).toMatch(/^rule "main": title failed: /);
  });

  it("treats an attach key that is empty or null as no key, and says so in the log", async () => {
    const source = await createSource({ name: unique("keyless").toLowerCase(), rules: [{ title: "body.t", attachKey: "has(body.k) ? body.k : null" }] });
    const first = await deliver(source, { t: "one", k: "" });
    const second = await deliver(source, { t: "two" });
    expect(first.body.outcome).toBe("opened");
    expect(second.body.outcome).toBe("opened");
    expect(second.body.incidentId).not.toBe(first.body.incidentId);
    const entries = await log(source.id, 2);
    for (const entry of entries) expect(entry.warnings).toEqual(["attachKey was empty or null: this delivery has no attach key and opens its own incident"]);
  });

  it("refuses at save what does not compile, and stops a hostile expression within its budget", async () => {
    const refusals: [unknown, RegExp][] = [
      [[{ title: "body.(" }], /rules\[0\]\.title: does not compile/],
      [[{ title: "nosuch(body)" }], /rules\[0\]\.title: unknown function "nosuch"/],
      [[{ title: "'t'", severity: "'urgent'" }], /rules\[0\]\.severity: must be one of sev1, sev2, sev3, sev4/],
      [[{ title: "string([1].map(a, [1].map(b, [1].map(c, c))))" }], /nested more than 2 deep/],
      [[{ title: `string(${"-(".repeat(600)}1${")".repeat(600)})` }], /nested/],
      [Array.from({ length: 21 }, (_, i) => ({ name: `r${i}`, title: "'t'" })), /at most 20 rules/],
    ];
    for (const [rules, message] of refusals) {
      const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: owner, body: { name: unique("bad").toLowerCase(), rules } });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.error).toMatch(message);
    }
    for (const reserved of ["metrics-monitor", "chat", "Bad Name"]) {
      const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: owner, body: { name: reserved, rules: [{ title: "'t'" }] } });
      expect(res.status).toBe(400);
    }

    const hostile = await createSource({
      name: unique("hostile").toLowerCase(),
      rules: [
        { name: "loop", when: "body.list.exists(x, body.list.exists(y, y == -1))", title: "'never'" },
        { name: "strings", title: "body.list.map(x, body.s).join('')" },
      ],
    });
    const big = { list: Array.from({ length: 20_000 }, (_, i) => i), s: "x".repeat(60_000) };
    const started = performance.now();
    const res = await deliver(hostile, big);
    const took = performance.now() - started;
    expect(res.body.outcome).toBe("opened");
    const incident = await getIncident(app, owner, res.body.incidentId);
    expect(incident.title).toBe(`Unmapped alert from ${hostile.name}`);
    // The budget stops it; on a machine too loaded to reach it in time, the evaluation's time bound
    // does, or, past that, the bound on the whole mapping's thread.
    expect(incident.timeline[0].data.mappingError).toMatch(
      /^(cost budget of 20000 exceeded|evaluation ran past its time bound of \d+ ms|the mapping ran past its time bound of \d+ ms)$/,
    );
    // The raw payload is kept within its bound, marked as cut.
    expect(incident.timeline[0].data.rawPayloadTruncated).toBe(true);
    expect(took).toBeLessThan(5_000);
  });

  /** About 1 MiB of JSON: one string of a million characters, lines of a hundred. */
  const MEGABYTE_MESSAGE = { message: `${"x".repeat(99)}\n`.repeat(10_300) };
  /** About 1 MiB of JSON in strings each under the 64 KiB rules read. */
  const MEGABYTE_PARTS = { parts: Array.from({ length: 16 }, (_, i) => `${i} ${"ab ".repeat(20_000)}`) };
  const STOPPED = /^(cost budget of 20000 exceeded|evaluation ran past its time bound of \d+ ms)$/;

  it("ends any rule over a 1 MiB body in the default incident, answers a preview with the error, and meanwhile answers another organization", async () => {
    const calm = await bootstrapOrg(app, unique("calm").toLowerCase().slice(0, 30));
    // Each of these froze the process for seconds to minutes when a call was charged after it ran.
    const flatten = await createSource({ name: unique("flatten").toLowerCase(), rules: [{ name: "flatten", title: "body.message.replace('\\n', ' ')" }] });
    const spread = await createSource({
      name: unique("spread").toLowerCase(),
      rules: [
        { name: "grow", when: "body.parts.exists(p, p.replace('', p).size() == 0)", title: "'never'" },
        { name: "loops", title: "body.parts.map(p, p.split('').join('-').lowerAscii()).join('')" },
      ],
    });
    const monitor = () => ({ title: "Latency high", alert_type: "error", alert_transition: "Triggered", alert_id: unique("calm"), event_id: unique("ev") });

    const hostile = [deliver(flatten, MEGABYTE_MESSAGE), deliver(spread, MEGABYTE_PARTS), deliver(flatten, MEGABYTE_MESSAGE), deliver(spread, MEGABYTE_PARTS)];
    // Another organization's triggers, sent while those are being mapped, are answered.
    const calmAnswers: number[] = [];
    for (let i = 0; i < 5; i++) calmAnswers.push((await postTrigger(app, calm.ingestToken, monitor())).status);
    const answers = await Promise.all(hostile);
    expect(calmAnswers).toEqual([201, 201, 201, 201, 201]);

    for (const [i, res] of answers.entries()) {
      // The first to each source opens its default incident, the second repeats on it.
      expect(res.body.outcome, JSON.stringify(res.body)).toMatch(/^(opened|attached)$/);
      const incident = await getIncident(app, owner, res.body.incidentId);
      expect(incident.title).toBe(`Unmapped alert from ${i % 2 === 0 ? flatten.name : spread.name}`);
      const error = incident.timeline.at(-1).data.mappingError as string;
      if (i % 2 === 0) expect(error).toBe("body.message is a string of 1030000 characters; rules read strings of at most 65536 (64 KiB)");
      else expect(error).toMatch(STOPPED);
    }
    const entries = await log(flatten.id, 2);
    expect(entries[0].error).toMatch(/^body\.message is a string of 1030000 characters/);

    // A preview answers the same errors, and records nothing.
    const preview = (source: { id: string }, body: unknown) =>
      app.call("POST", `/o/${OWNER.org}/custom-sources/${source.id}/preview`, { token: owner, body: { body } });
    const previewed = await preview(flatten, MEGABYTE_MESSAGE);
    expect(previewed.status).toBe(200);
    expect(previewed.body).toMatchObject({
      error: "body.message is a string of 1030000 characters; rules read strings of at most 65536 (64 KiB)",
      rules: [{ rule: "flatten", matched: false, reason: "not tried: the payload has a string too long for rules" }],
    });
    const stopped = await preview(spread, MEGABYTE_PARTS);
    expect(stopped.status).toBe(200);
    expect(stopped.body.error).toMatch(STOPPED);
    // The rules themselves still work on a payload within the bounds.
    expect((await preview(flatten, { message: "a\nb" })).body.fields).toMatchObject({ title: "a b" });
  });

  it("records a built-in alert whose grouping override fails on a huge or hostile title, with the source's own grouping", async () => {
    const ingest = (await app.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner })).body.token as string;
    const put = await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, {
      token: owner,
      body: { attachKey: "body.title.replace('', body.title).replace('', body.title)" },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    try {
      for (const title of ["t".repeat(200_000), `${"ab ".repeat(20_000)}!`]) {
        const alertId = unique("huge");
        const alert = { title, alert_type: "error", alert_transition: "Triggered", alert_id: alertId, event_id: unique("ev") };
        const first = await post("/triggers", alert, { authorization: `Bearer ${ingest}` });
        expect(first.status, JSON.stringify(first.body)).toBe(201);
        expect(first.body.outcome).toBe("opened");
        // The source's own grouping (its alert id): a repeat attaches to the incident it opened.
        const again = await post("/triggers", { ...alert, event_id: unique("ev") }, { authorization: `Bearer ${ingest}` });
        expect(again.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
        const incident = await getIncident(app, owner, first.body.incidentId);
        expect(incident.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
      }
    } finally {
      expect((await app.call("DELETE", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, { token: owner })).status).toBe(204);
    }
  });

  it("takes the credential as Bearer, and in the path or as Basic only when the source allows it; rotation and revocation are immediate and audited", async () => {
    const rules = [{ title: "'up'" }];
    const strict = await createSource({ name: unique("strict").toLowerCase(), rules });
    expect(strict.pathUrl).toBeNull();
    const basic = `Basic ${Buffer.from(`any:${strict.secret}`).toString("base64")}`;
    expect((await post(`/triggers/custom/${strict.id}/${strict.secret}`, {})).status).toBe(401);
    expect((await post(`/triggers/custom/${strict.id}`, {}, { authorization: basic })).status).toBe(401);
    expect((await post(`/triggers/custom/${strict.id}`, {})).status).toBe(401);
    // The one answer the docs give for every refused credential (docs/how-to/custom-sources.md).
    expect(await post(`/triggers/custom/${strict.id}`, {}, { authorization: `Bearer ${"0".repeat(64)}` })).toMatchObject({
      status: 401,
      body: { error: "unauthorized: send the source's current credential as Authorization: Bearer <secret>" },
    });

    const open = await createSource({ name: unique("urlonly").toLowerCase(), rules, auth: { secretInPath: true, basicAuth: true } });
    expect(open.pathUrl).toBe(`${PUBLIC_URL}/triggers/custom/${open.id}/${open.secret}`);
    expect((await post(`/triggers/custom/${open.id}/${open.secret}`, {})).body.outcome).toBe("opened");
    const openBasic = `Basic ${Buffer.from(`zabbix:${open.secret}`).toString("base64")}`;
    expect((await post(`/triggers/custom/${open.id}`, {}, { authorization: openBasic })).body.outcome).toBe("opened");
    // Another source's secret does not open this one.
    expect((await post(`/triggers/custom/${open.id}`, {}, { authorization: `Bearer ${strict.secret}` })).status).toBe(401);

    const listed = await app.call("GET", `/o/${OWNER.org}/custom-sources/${strict.id}`, { token: owner });
    expect(JSON.stringify(listed.body)).not.toContain(strict.secret);
    expect(listed.body).toMatchObject({ id: strict.id, badge: strict.name, credentialState: "active" });

    // Each intake replica caches the source it looked up: every one has the old credential cached
    // before the rotation, and refuses it on the very next delivery after.
    expect(await statusesOf(strict, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(201));
    const rotated = await app.call("POST", `/o/${OWNER.org}/custom-sources/${strict.id}/credential`, { token: owner });
    expect(rotated.status).toBe(200);
    expect(await statusesOf(strict, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(401));
    const current = { id: strict.id, secret: rotated.body.secret as string };
    expect(await statusesOf(current, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(201));

    const revoked = await app.call("DELETE", `/o/${OWNER.org}/custom-sources/${strict.id}/credential`, { token: owner });
    expect(revoked.status).toBe(204);
    expect(await statusesOf(current, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(401));
    expect((await app.call("GET", `/o/${OWNER.org}/custom-sources/${strict.id}`, { token: owner })).body.credentialState).toBe("revoked");

    for (const kind of ["custom_source.created", "custom_source.credential_rotated", "custom_source.credential_revoked"]) {
      const events = await auditEvents(app, owner, kind, (list) => list.some((e) => e.data.id === strict.id));
      expect(
        events.find((e) => e.data.id === strict.id),
        kind,
      ).toMatchObject({ actor: OWNER.email });
      expect(JSON.stringify(events)).not.toContain(strict.secret);
    }
  });

  it("keeps the last 50 payloads for admins only, with secret headers redacted", async () => {
    const source = await createSource({ name: unique("kept").toLowerCase(), rules: [{ title: "'t'", attachKey: "'one'" }] });
    for (let i = 0; i < 52; i++) {
      const res = await deliver(source, { n: i }, { "x-api-key": "hunter2", "x-env": "prod" });
      expect(res.status).toBeLessThan(300);
    }
    // Over NATS a replica writes what it answered up to 20 ms after the other: wait for the last
    // ten answered, not only the newest, before reading which 50 are kept.
    const lastTen = (rows: any[]) => Array.from({ length: 10 }, (_, i) => 51 - i).every((n) => rows.some((p) => p.body.n === n));
    const payloads = await recorded(source.id, "payloads", 50, lastTen);
    expect(payloads).toHaveLength(50);
    const numbers = payloads.map((p) => p.body.n as number);
    expect(numbers[0]).toBe(51);
    expect(numbers).toEqual([...numbers].sort((a, b) => b - a));
    // Each replica writes what it answered every 20 ms, so over NATS the 50 kept are the last 50
    // written: at most the oldest few can differ from the last 50 to arrive.
    if (mode === "one process") expect(numbers.at(-1)).toBe(2);
    else expect(numbers.slice(0, 40)).toEqual(Array.from({ length: 40 }, (_, i) => 51 - i));
    expect(payloads[0].headers).toMatchObject({ authorization: "[redacted]", "x-api-key": "[redacted]", "x-env": "prod" });
    expect(JSON.stringify(payloads)).not.toContain(source.secret);
    expect(JSON.stringify(payloads)).not.toContain("hunter2");

    const member = await bootstrapMember(app, owner);
    expect((await app.call("GET", `/o/${OWNER.org}/custom-sources/${source.id}/payloads`, { token: member })).status).toBe(403);
    expect((await app.call("GET", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: member })).status).toBe(200);
    expect(
      (await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: member, body: { name: unique("m").toLowerCase(), rules: [{ title: "'t'" }] } }))
        .status,
    ).toBe(403);
  });

  it("redacts credential-looking query parameters and headers in kept payloads by their names' word parts", async () => {
    const source = await createSource({ name: unique("redact").toLowerCase(), rules: [{ title: "'t'", attachKey: "'one'" }] });
    const query = "token=q-tok&api_key=q-api&sessionId=q-sess&monkey=banana&region=eu";
    const res = await post(
      `/triggers/custom/${source.id}?${query}`,
      { n: 1 },
      {
        authorization: `Bearer ${source.secret}`,
        "x-access-key": "h-access",
        authentication: "h-authn",
        "x-credentials": "h-cred",
        "x-passwd": "h-pass",
        "x-hub-signature-256": "h-sig",
        "x-monkey": "still-here",
        "x-keyboard": "qwerty",
      },
    );
    expect(res.status).toBeLessThan(300);
    const [payload] = await recorded(source.id, "payloads", 1);
    expect(payload.query).toEqual({ token: "[redacted]", api_key: "[redacted]", sessionId: "[redacted]", monkey: "banana", region: "eu" });
    expect(payload.headers).toMatchObject({
      authorization: "[redacted]",
      "x-access-key": "[redacted]",
      authentication: "[redacted]",
      "x-credentials": "[redacted]",
      "x-passwd": "[redacted]",
      "x-hub-signature-256": "[redacted]",
      "x-monkey": "still-here",
      "x-keyboard": "qwerty",
    });
    for (const secret of ["q-tok", "q-api", "q-sess", "h-access", "h-authn", "h-cred", "h-pass", "h-sig"])
      expect(JSON.stringify(payload)).not.toContain(secret);
  });

  it("lands every one of many concurrent deliveries to one source, keeping 50 payloads", async () => {
    const source = await createSource({
      name: unique("storm").toLowerCase(),
      rules: [{ title: "'storm'", attachKey: "string(int(body.n) % 5)", eventId: "string(body.n)" }],
    });
    let next = 0;
    const statuses: number[] = [];
    await Promise.all(
      Array.from({ length: 25 }, async () => {
        while (next < 300) {
          const n = next++;
          statuses.push((await deliver(source, { n })).status);
        }
      }),
    );
    expect(statuses.filter((s) => s !== 200 && s !== 201)).toEqual([]);
    expect(statuses.filter((s) => s === 201)).toHaveLength(5);
    expect(await recorded(source.id, "payloads", 50)).toHaveLength(50);
    expect(await log(source.id, 300)).toHaveLength(300);
  });

  it("previews a payload without creating anything: fields, the rule that matched, why the others did not, where it would attach", async () => {
    const name = unique("preview").toLowerCase();
    const source = await createSource({ name, rules: ZABBIX_RULES });
    const problem = { status: "PROBLEM", name: "CPU high", severity: "High", host: "web1", trigger: "cpu", eventid: "7" };
    const before = (await listIncidents(app, owner)).length;
    const preview = (body: unknown) => app.call("POST", `/o/${OWNER.org}/custom-sources/${source.id}/preview`, { token: owner, body });

    const first = await preview({ body: problem });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toMatchObject({
      matchedRule: "problem",
      would: "opened",
      incidentId: null,
      error: null,
      fields: { kind: "trigger", title: "CPU high", severity: "sev3", attachKey: "web1/cpu", eventId: "7", entityKind: "host", entityId: "web1" },
      rules: [
        { rule: "maintenance", matched: false, reason: "condition is false" },
        { rule: "problem", matched: true, reason: "condition is true" },
        { rule: "resolved", matched: false, reason: 'not tried: rule "problem" matched first' },
      ],
    });
    // How fast a preview answers is a figure of `npm run bench -- custom-source`, not a test's verdict.
    expect((await listIncidents(app, owner)).length).toBe(before);

    const opened = await deliver(source, problem);
    const attach = await preview({
      payloadId: (await recorded(source.id, "payloads", 1))[0].id,
    });
    expect(attach.body).toMatchObject({ would: "attached", incidentId: opened.body.incidentId });

    // Unsaved rules: see what an edit would do before saving it.
    const edited = await preview({ body: { status: "nonsense" }, rules: [{ name: "only", when: "body.status == 'PROBLEM'", title: "'x'" }] });
    expect(edited.body).toMatchObject({
      matchedRule: null,
      error: "no rule matched",
      would: "opened",
      rules: [{ rule: "only", matched: false, reason: "condition is false" }],
    });
  });

  it("is suppressed by a maintenance window naming the source", async () => {
    const source = await createSource({ name: unique("maint").toLowerCase(), rules: [{ title: "'t'" }] });
    await duringMaintenance(app, owner, { sources: [source.name] }, async () => {
      const res = await deliver(source, {});
      expect(res.status).toBe(200);
      expect(res.body.outcome).toBe("suppressed");
    });
    const entries = await log(source.id, 1);
    expect(entries[0].outcome).toBe("suppressed");
  });

  it("updates rules (compiled again at once) and deletes a source", async () => {
    const source = await createSource({ name: unique("edit").toLowerCase(), rules: [{ title: "'old'" }] });
    // Every replica has the source cached with its old rules before the change, and none maps with them after.
    expect(await statusesOf(source, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(201));
    const updated = await app.call("PATCH", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: owner, body: { rules: [{ title: "'new'" }] } });
    expect(updated.status).toBe(200);
    for (let i = 0; i < WARM_EVERY_REPLICA; i++) {
      const res = await deliver(source, {});
      expect((await getIncident(app, owner, res.body.incidentId)).title).toBe("new");
    }
    const bad = await app.call("PATCH", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: owner, body: { rules: [{ title: "body.(" }] } });
    expect(bad.status).toBe(400);
    expect((await app.call("DELETE", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: owner })).status).toBe(204);
    expect(await statusesOf(source, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(401));
    expect((await app.call("GET", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: owner })).status).toBe(404);
  });

  it("maps every preset's fixtures: trigger opens, repeat attaches, recovery records, malformed opens the default incident", async () => {
    const presets = await app.call("GET", `/o/${OWNER.org}/custom-source-presets`, { token: owner });
    expect(presets.status).toBe(200);
    const names = (presets.body.presets as any[]).map((p) => p.name);
    expect(names.sort()).toEqual([
      "checkmk",
      "elastic",
      "generic-json",
      "github",
      "gitlab",
      "grafana",
      "jenkins",
      "nagios",
      "newrelic",
      "uptime-kuma",
      "uptimerobot",
      "zabbix",
    ]);
    for (const preset of names) {
      const source = await createSource({ name: unique(preset).toLowerCase(), preset });
      const trigger = await deliver(source, fixture(`${preset}/trigger.json`));
      expect(trigger.body.outcome, preset).toBe("opened");
      const repeat = await deliver(source, fixture(`${preset}/repeat.json`));
      expect(repeat.body, preset).toMatchObject({ outcome: "attached", incidentId: trigger.body.incidentId });
      const recovery = await deliver(source, fixture(`${preset}/recovery.json`));
      expect(recovery.body, preset).toMatchObject({ outcome: "recorded", incidentId: trigger.body.incidentId });
      const incident = await getIncident(app, owner, trigger.body.incidentId);
      expect(incident.source, preset).toBe(source.name);
      expect(
        incident.timeline.map((e: any) => e.kind),
        preset,
      ).toEqual(["opened", "repeat", "recovery"]);
      const malformed = await deliver(source, fixture(`${preset}/malformed.json`));
      expect(malformed.body.outcome, preset).toBe("opened");
      expect((await getIncident(app, owner, malformed.body.incidentId)).title, preset).toBe(`Unmapped alert from ${source.name}`);
      const got = await app.call("GET", `/o/${OWNER.org}/custom-sources/${source.id}`, { token: owner });
      expect(got.body.preset).toBe(preset);
    }
  });

  it("uptime-kuma: a certificate-expiry warning opens an incident, its next threshold attaches; the Test button opens nothing", async () => {
    const source = await createSource({ name: unique("kuma").toLowerCase(), preset: "uptime-kuma" });
    const first = await deliver(source, fixture("uptime-kuma/certificate-expiry.json"));
    expect(first.body.outcome).toBe("opened");
    const again = await deliver(source, fixture("uptime-kuma/certificate-expiry-1.23.json"));
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
    const incident = await getIncident(app, owner, first.body.incidentId);
    expect(incident).toMatchObject({ title: "Checkout API: TLS certificate expires in 13 days", severity: "sev3" });
    expect((await deliver(source, fixture("uptime-kuma/test-notification.json"))).body.outcome).toBe("ignored");
  });

  it("groups by an organization's override, for a built-in source and a custom one, and opens anew past a grouping window", async () => {
    const ingest = (await app.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner })).body.token as string;
    const monitor = (alertId: string, service: string) => ({
      title: `CPU high (${alertId})`,
      alert_type: "error",
      alert_transition: "Triggered",
      alert_id: alertId,
      event_id: unique("ev"),
      tags: [`service:${service}`],
    });
    const service = unique("svc");
    // By default two monitors of one service are two incidents.
    const a = await post("/triggers", monitor(unique("m"), service), { authorization: `Bearer ${ingest}` });
    const b = await post("/triggers", monitor(unique("m"), service), { authorization: `Bearer ${ingest}` });
    expect([a.body.outcome, b.body.outcome]).toEqual(["opened", "opened"]);

    const put = await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, {
      token: owner,
      body: { attachKey: "body.tags.filter(t, t.startsWith('service:'))[0]" },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const bad = await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, { token: owner, body: { attachKey: "body.(" } });
    expect(bad.status).toBe(400);
    // Applied by the very next delivery, on whichever intake replica takes it: every replica
    // dropped its cached overrides before the change was answered.
    const service2 = unique("svc");
    const c = await post("/triggers", monitor(unique("m"), service2), { authorization: `Bearer ${ingest}` });
    const d = await post("/triggers", monitor(unique("m"), service2), { authorization: `Bearer ${ingest}` });
    expect(c.body.outcome).toBe("opened");
    expect(d.body).toMatchObject({ outcome: "attached", incidentId: c.body.incidentId });
    expect((await app.call("DELETE", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, { token: owner })).status).toBe(204);

    // A custom source with a one-hour window: an incident opened two hours ago is not attached to.
    const source = await createSource({
      name: unique("windowed").toLowerCase(),
      rules: [
        { name: "ok", when: "body.state == 'ok'", kind: "'recovery'", attachKey: "body.host" },
        { name: "down", title: "body.host + ' down'", attachKey: "body.host" },
      ],
    });
    expect((await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/${source.name}`, { token: owner, body: { windowHours: 1 } })).status).toBe(200);
    const listed = await app.call("GET", `/o/${OWNER.org}/grouping-overrides`, { token: owner });
    expect(listed.body.overrides).toContainEqual({ source: source.name, attachKey: "", windowHours: 1 });
    const first = await deliver(source, { host: "h1" });
    expect(first.body.outcome).toBe("opened");
    expect((await deliver(source, { host: "h1" })).body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });

    const db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await db`update incidents.incidents set opened_at = opened_at - interval '2 hours' where id = ${first.body.incidentId}`;
    } finally {
      await db.end();
    }
    const preview = await app.call("POST", `/o/${OWNER.org}/custom-sources/${source.id}/preview`, { token: owner, body: { body: { host: "h1" } } });
    expect(preview.body).toMatchObject({ would: "opened", incidentId: null });
    // Past the window, concurrent deliveries open exactly one new incident, and later ones attach to it.
    const racing = await Promise.all(Array.from({ length: 6 }, () => deliver(source, { host: "h1" })));
    const opened = racing.filter((r) => r.body.outcome === "opened");
    expect(opened).toHaveLength(1);
    const second = opened[0]!.body.incidentId;
    expect(second).not.toBe(first.body.incidentId);
    for (const r of racing) expect(r.body.incidentId).toBe(second);
    expect((await deliver(source, { host: "h1", state: "ok" })).body).toMatchObject({ outcome: "recorded", incidentId: second });
    // The old incident is untouched: one opened entry and its one repeat.
    expect((await getIncident(app, owner, first.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
  });

  it("exports the configuration as YAML without secrets, and applies a file idempotently, over the API and the admin command", async () => {
    const org = unique("code").toLowerCase().slice(0, 30);
    const { owner: token } = await bootstrapOrg(app, org);
    const created = await app.call("POST", `/o/${org}/custom-sources`, {
      token,
      body: { name: "zabbix-prod", preset: "zabbix", description: "Production Zabbix" },
    });
    expect(created.status).toBe(201);
    const secret = created.body.credential.secret as string;
    expect((await app.call("PUT", `/o/${org}/grouping-overrides/metrics-monitor`, { token, body: { windowHours: 6 } })).status).toBe(200);

    const exported = await app.call("GET", `/o/${org}/config`, { token });
    expect(exported.status).toBe(200);
    const yaml = exported.body.yaml as string;
    expect(yaml).toContain("name: zabbix-prod");
    expect(yaml).toContain("preset: zabbix");
    expect(yaml).toContain("description: Production Zabbix");
    expect(yaml).toContain("windowHours: 6");
    expect(yaml).not.toContain(secret);
    const apply = (body: unknown) => app.call("POST", `/o/${org}/config`, { token, body });
    // The exported file applied back changes nothing.
    expect((await apply({ yaml })).body).toMatchObject({ changes: [], applied: false });

    const withNewSource = yaml
      .replace("windowHours: 6", "windowHours: 8")
      .replace("description: Production Zabbix", "description: Production Zabbix, every host")
      .replace("customSources:\n", "customSources:\n  - name: kuma\n    description: Uptime Kuma\n    rules:\n      - title: \"'down'\"\n");
    const plan = await apply({ yaml: withNewSource, dryRun: true });
    expect(plan.status, JSON.stringify(plan.body)).toBe(200);
    expect(plan.body.changes).toEqual([
      { action: "create", kind: "customSource", name: "kuma" },
      { action: "update", kind: "customSource", name: "zabbix-prod" },
      { action: "update", kind: "groupingOverride", name: "metrics-monitor" },
    ]);
    expect(plan.body.applied).toBe(false);
    expect((await app.call("GET", `/o/${org}/custom-sources`, { token })).body.customSources).toHaveLength(1);

    const applied = await apply({ yaml: withNewSource });
    expect(applied.body).toMatchObject({ applied: true, credentials: [{ name: "kuma" }] });
    const listed = (await app.call("GET", `/o/${org}/custom-sources`, { token })).body.customSources;
    const kuma = listed.find((s: any) => s.name === "kuma");
    expect(kuma.description).toBe("Uptime Kuma");
    expect(listed.find((s: any) => s.name === "zabbix-prod").description).toBe("Production Zabbix, every host");
    const kumaCredential = { id: kuma.id as string, secret: applied.body.credentials[0].credential.secret as string };
    expect((await deliver(kumaCredential, {})).body.outcome).toBe("opened");
    // Every replica has kuma cached before the file deletes it, below.
    expect(await statusesOf(kumaCredential, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(201));
    // The second time, nothing: and the first source kept its credential.
    expect((await apply({ yaml: withNewSource })).body).toMatchObject({ changes: [], applied: false });
    expect((await deliver({ id: created.body.source.id, secret }, { event_value: "0", event_id: "1", event_recovery_id: "2" })).status).toBe(200);

    // The admin command: export to a file, delete a source from it, plan, apply, apply again.
    const dir = mkdtempSync(join(tmpdir(), "warroom-config-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "warroom.yaml");
    const admin = (...args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(
          process.execPath,
          [...nodeArgsFor("services/admin/admin-cli.ts"), ...args],
          { env: { ...process.env, WARROOM_URL: app.url, WARROOM_TOKEN: token }, timeout: 60_000 },
          (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
    const exportedByCli = await admin("export", "--org", org, "--out", file);
    expect(exportedByCli.code, exportedByCli.stderr).toBe(0);
    const text = readFileSync(file, "utf8");
    expect(text).toContain("name: kuma");
    writeFileSync(file, text.replace(/ {2}- name: kuma\n(?: {4}.*\n)+/, ""));
    const dry = await admin("apply", file, "--org", org, "--dry-run");
    expect(dry.stdout).toBe("delete customSource kuma\ndry run: nothing changed\n");
    expect((await admin("apply", file, "--org", org)).stdout).toBe("delete customSource kuma\napplied 1 change(s)\n");
    expect(await statusesOf(kumaCredential, WARM_EVERY_REPLICA)).toEqual(Array(WARM_EVERY_REPLICA).fill(401));
    expect((await admin("apply", file, "--org", org)).stdout).toBe("no changes: the organization matches the file\n");
    expect((await app.call("GET", `/o/${org}/custom-sources`, { token })).body.customSources.map((s: any) => s.name)).toEqual(["zabbix-prod"]);
    // A file that does not compile changes nothing and names the rule.
    const broken = await apply({ yaml: 'version: 1\ncustomSources:\n  - name: x\n    rules:\n      - title: "body.("\n' });
    expect(broken.status).toBe(400);
    expect(broken.body.error).toMatch(/customSources\[0\] \(x\): rules\[0\]\.title: does not compile/);
    expect((await app.call("GET", `/o/${org}/custom-sources`, { token })).body.customSources).toHaveLength(1);
  }, 120_000);

  it("exports and applies heartbeats and maintenance windows: a plan first, then nothing the second time", async () => {
    const org = unique("beats").toLowerCase().slice(0, 30);
    const { owner: token } = await bootstrapOrg(app, org);
    const hour = 3_600_000;
    const at = (hours: number) => new Date(Math.ceil(Date.now() / hour) * hour + hours * hour).toISOString();
    const register = (body: Record<string, unknown>) => app.call("POST", `/o/${org}/heartbeats`, { token, body });
    expect((await register({ name: "nightly-backup", schedule: "0 3 * * *", timezone: "Europe/Berlin", graceSeconds: 600, maxRunSeconds: 3600 })).status).toBe(
      201,
    );
    expect((await register({ name: "queue-worker", expectedIntervalSeconds: 300, graceSeconds: 60 })).status).toBe(201);
    const window = {
      startsAt: at(1),
      endsAt: at(3),
      reason: "database upgrade",
      match: { sources: ["metrics-monitor"], entities: [{ kind: "host", id: "db1" }] },
    };
    expect((await app.call("POST", `/o/${org}/maintenance-windows`, { token, body: window })).status).toBe(201);

    const exported = await app.call("GET", `/o/${org}/config`, { token });
    expect(exported.status).toBe(200);
    const yaml = exported.body.yaml as string;
    const heartbeats = (await app.call("GET", `/o/${org}/heartbeats`, { token })).body.heartbeats as any[];
    // The ping URLs are credentials: never in the file.
    for (const h of heartbeats) expect(yaml).not.toContain(new URL(h.pingUrl).pathname);
    const { parse } = await import("yaml");
    const file = parse(yaml);
    expect(file.heartbeats).toEqual([
      { name: "nightly-backup", schedule: "0 3 * * *", timezone: "Europe/Berlin", graceSeconds: 600, maxRunSeconds: 3600 },
      { name: "queue-worker", expectedIntervalSeconds: 300, graceSeconds: 60 },
    ]);
    expect(file.maintenanceWindows).toEqual([window]);
    const apply = (body: unknown) => app.call("POST", `/o/${org}/config`, { token, body });
    expect((await apply({ yaml })).body).toMatchObject({ changes: [], applied: false });

    const { stringify } = await import("yaml");
    const added = { startsAt: at(24), endsAt: at(26), reason: "network work" };
    const wanted = stringify({
      version: 1,
      heartbeats: [
        { name: "hourly-report", schedule: "@hourly", graceSeconds: 120 },
        { name: "queue-worker", schedule: "*/5  * * * *", graceSeconds: 90, minRunSeconds: 5 },
      ],
      maintenanceWindows: [window, added],
    });
    const windowName = (w: { startsAt: string; endsAt: string; reason: string }) => `${w.startsAt}/${w.endsAt} ${w.reason}`;
    const plan = await apply({ yaml: wanted, dryRun: true });
    expect(plan.status, JSON.stringify(plan.body)).toBe(200);
    expect(plan.body).toMatchObject({ applied: false });
    expect(plan.body.changes).toEqual([
      { action: "create", kind: "heartbeat", name: "hourly-report" },
      { action: "update", kind: "heartbeat", name: "queue-worker" },
      { action: "delete", kind: "heartbeat", name: "nightly-backup" },
      { action: "create", kind: "maintenanceWindow", name: windowName(added) },
    ]);
    // A dry run changes nothing.
    expect((await app.call("GET", `/o/${org}/heartbeats`, { token })).body.heartbeats.map((h: any) => h.name)).toEqual(["nightly-backup", "queue-worker"]);
    expect((await app.call("GET", `/o/${org}/maintenance-windows`, { token })).body.maintenanceWindows).toHaveLength(1);

    const applied = await apply({ yaml: wanted });
    expect(applied.status, JSON.stringify(applied.body)).toBe(200);
    expect(applied.body).toMatchObject({ applied: true });
    const now = (await app.call("GET", `/o/${org}/heartbeats`, { token })).body.heartbeats as any[];
    expect(now.map((h) => h.name)).toEqual(["hourly-report", "queue-worker"]);
    expect(now[1]).toMatchObject({ schedule: "*/5 * * * *", timezone: "UTC", graceSeconds: 90, minRunSeconds: 5, expectedIntervalSeconds: 0 });
    expect(now[1].maxRunSeconds ?? null).toBeNull();
    // The heartbeat that was updated kept its ping URL.
    expect(now[1].pingUrl).toBe(heartbeats.find((h) => h.name === "queue-worker").pingUrl);
    expect((await app.call("GET", `/o/${org}/maintenance-windows`, { token })).body.maintenanceWindows).toHaveLength(2);
    // The second time, nothing.
    expect((await apply({ yaml: wanted })).body).toMatchObject({ changes: [], applied: false });

    // A section left out stays as it is; an empty one is the whole truth.
    expect((await apply({ yaml: "version: 1\nheartbeats: []\n", dryRun: true })).body.changes).toEqual([
      { action: "delete", kind: "heartbeat", name: "hourly-report" },
      { action: "delete", kind: "heartbeat", name: "queue-worker" },
    ]);
    expect((await apply({ yaml: `version: 1\nmaintenanceWindows: [${JSON.stringify(added)}]\n` })).body).toMatchObject({
      changes: [{ action: "delete", kind: "maintenanceWindow", name: windowName(window) }],
      applied: true,
    });
    expect((await app.call("GET", `/o/${org}/maintenance-windows`, { token })).body.maintenanceWindows.map((w: any) => w.reason)).toEqual(["network work"]);

    // Everything is checked before anything changes: a bad heartbeat refuses the whole file.
    const refused = await apply({ yaml: stringify({ version: 1, heartbeats: [{ name: "x", graceSeconds: 60 }], maintenanceWindows: [] }) });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatch(/heartbeats\[0\] \(x\): expectedIntervalSeconds/);
    const late = await apply({ yaml: stringify({ version: 1, maintenanceWindows: [{ startsAt: at(2), endsAt: at(1), reason: "backwards" }] }) });
    expect(late.status).toBe(400);
    expect(late.body.error).toMatch(/maintenanceWindows\[0\]: endsAt must be after startsAt/);
    // A window of the file that has ended is history: nothing to create, so a file exported today
    // still applies as "no changes" next week; ended windows are never deleted by a file.
    const ended = { startsAt: at(-3), endsAt: at(-2), reason: "over" };
    expect((await apply({ yaml: stringify({ version: 1, maintenanceWindows: [ended, added] }) })).body).toMatchObject({ changes: [], applied: false });
    expect((await app.call("GET", `/o/${org}/heartbeats`, { token })).body.heartbeats).toHaveLength(2);
    expect((await app.call("GET", `/o/${org}/maintenance-windows`, { token })).body.maintenanceWindows).toHaveLength(1);
  });

  it("limits an organization to 50 sources, counted across replicas", async () => {
    const org = unique("limits").toLowerCase().slice(0, 30);
    const { owner: token } = await bootstrapOrg(app, org);
    const attempts = await Promise.all(
      Array.from({ length: 55 }, (_, i) => app.call("POST", `/o/${org}/custom-sources`, { token, body: { name: `s${i}`, rules: [{ title: "'t'" }] } })),
    );
    expect(attempts.filter((r) => r.status === 201)).toHaveLength(50);
    const refused = attempts.filter((r) => r.status !== 201);
    expect(refused.map((r) => r.status)).toEqual([409, 409, 409, 409, 409]);
    expect(refused[0]!.body.error).toBe("an organization has at most 50 custom sources");
    const listed = await app.call("GET", `/o/${org}/custom-sources`, { token });
    expect(listed.body.customSources).toHaveLength(50);
    expect(listed.body.customSources[0].id).toMatch(UUID);
  });
});

async function bootstrapMember(app: IntakeApp, owner: string): Promise<string> {
  const email = `${unique("member")}@acme.test`;
  const password = "member password 123";
  const added = await app.call("POST", `/o/${OWNER.org}/members`, { token: owner, body: { email, password, role: "member" } });
  expect(added.status).toBeLessThan(300);
  const login = await app.call("POST", "/auth/login", { body: { email, password, orgSlug: OWNER.org } });
  return login.body.accessToken;
}

import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { promisify } from "node:util";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { castOf, eventually, type Cast } from "../testing/kit.js";

// Healthchecks' ping API on each heartbeat's own ping URL, driven by the very commands
// Healthchecks' documentation gives for crontab lines and scripts (curl and wget, unchanged), over
// real HTTP against real Postgres. The periodic sweep is an hour away: nothing here waits on it.

const run = promisify(execFile);

let app: TestApp;
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
  cast = await castOf(app);
  db = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

const KEY_URL = /^http:\/\/localhost:\d+\/ping\/([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$/;

/** Registers a heartbeat and answers its ping URL, checked against the pinned shape. */
async function register(name: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 3600, graceSeconds: 60, ...extra } });
  expect(res.status).toBe(201);
  expect(res.body.pingUrl).toMatch(KEY_URL);
  expect(res.body.pingUrl.startsWith(`http://localhost:${new URL(app.url).port}/ping/`)).toBe(true);
  return res.body.pingUrl as string;
}

async function read(name: string) {
  const res = await app.call("GET", `/o/acme/heartbeats/${name}`, { token: cast.member });
  expect(res.status).toBe(200);
  return res.body;
}

async function history(name: string): Promise<{ kind: string; runSeconds?: number; exitStatus?: number; runId?: string; bodyBytes: number }[]> {
  const res = await app.call("GET", `/o/acme/heartbeats/${name}/pings`, { token: cast.member });
  expect(res.status).toBe(200);
  return res.body.pings;
}

/** A shell command as a crontab line runs it; answers its exit code, output and error output. */
async function sh(command: string, env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run("/bin/sh", ["-c", command], { env: { ...process.env, ...env }, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

async function raw(method: string, url: string, body?: string): Promise<{ status: number; text: string; type: string | null }> {
  const res = await fetch(url, { method, body });
  return { status: res.status, text: await res.text(), type: res.headers.get("content-type") };
}

describe("Healthchecks' own examples against our ping URL", () => {
  it("curl -fsS -m 10 --retry 5 -o /dev/null: a plain GET with no header pings", async () => {
    const url = await register("hc-curl");
    expect((await read("hc-curl")).lastSeenAt).toBeNull();
    const result = await sh(`curl -fsS -m 10 --retry 5 -o /dev/null ${url}`);
    expect(result).toEqual({ code: 0, stdout: "", stderr: "" });
    const heartbeat = await read("hc-curl");
    expect(heartbeat.lastSeenAt).toBeDefined();
    expect(heartbeat.lastPing.kind).toBe("success");
    expect(heartbeat.pingUrl).toBe(url);
  });

  it("wget -q -O /dev/null: pings", async () => {
    const url = await register("hc-wget");
    const result = await sh(`wget -q -O /dev/null ${url}`);
    expect(result).toEqual({ code: 0, stdout: "", stderr: "" });
    expect((await read("hc-wget")).lastSeenAt).toBeDefined();
  });

  it("answers a plain OK to GET, POST and HEAD, each a ping", async () => {
    const url = await register("hc-verbs");
    for (const method of ["GET", "POST", "HEAD"]) {
      const res = await raw(method, url);
      expect(res.status, method).toBe(200);
      expect(res.type, method).toBe("text/plain; charset=utf-8");
      expect(res.text, method).toBe(method === "HEAD" ? "" : "OK");
    }
    // HEAD as Healthchecks' docs write it for curl.
    expect((await sh(`curl -fsS -m 10 --retry 5 -I ${url}`)).code).toBe(0);
    expect((await history("hc-verbs")).map((p) => p.kind)).toEqual(["success", "success", "success", "success"]);
  });

  it("/start then /$? keeps the run time; a non-zero status is a failure with it", async () => {
    const url = await register("hc-timed");
    const script = `
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/start"
      sleep 1
      true
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/$?"
    `;
    expect((await sh(script, { URL: url })).code).toBe(0);
    const heartbeat = await read("hc-timed");
    expect(heartbeat.lastPing.kind).toBe("success");
    expect(heartbeat.lastPing.exitStatus).toBe(0);
    expect(heartbeat.lastPing.runSeconds).toBeGreaterThanOrEqual(1);
    expect(heartbeat.runningSince).toBeNull();

    expect(
      (await sh(`curl -fsS -m 10 --retry 5 -o /dev/null "$URL/start"; sh -c 'exit 3'; curl -fsS -m 10 --retry 5 -o /dev/null "$URL/$?"`, { URL: url })).code,
    ).toBe(0);
    const failed = await read("hc-timed");
    expect(failed.lastPing.kind).toBe("fail");
    expect(failed.lastPing.exitStatus).toBe(3);
    expect(failed.lastPing.runSeconds).toBeGreaterThanOrEqual(0);
    expect((await history("hc-timed")).map((p) => [p.kind, p.exitStatus ?? null])).toEqual([
      ["fail", 3],
      ["start", null],
      ["success", 0],
      ["start", null],
    ]);
  });

  it("/fail with the job's output as the body opens an incident that shows it", async () => {
    const url = await register("hc-fail");
    const output = "pg_dump: error: connection to server failed\nexit 1";
    const result = await sh(`m="$OUTPUT"; curl -fsS -m 10 --retry 5 -o /dev/null --data-raw "$m" "$URL/fail"`, { URL: url, OUTPUT: output });
    expect(result.code).toBe(0);
    const heartbeat = await read("hc-fail");
    expect(heartbeat.lastPing).toMatchObject({ kind: "fail", body: output, bodyCut: false, bodyBytes: Buffer.byteLength(output) });
    const incident = await eventually("the failure incident", async () => {
      const res = await app.call("GET", "/o/acme/incidents?limit=1000", { token: cast.member });
      return res.body.incidents.find((i: { entity: { id: string } | null }) => i.entity?.id === "hc-fail");
    });
    expect(incident.title).toBe("Heartbeat hc-fail failed");
    const detail = await app.call("GET", `/o/acme/incidents/${incident.id}`, { token: cast.member });
    expect(JSON.stringify(detail.body.timeline[0])).toContain("pg_dump: error: connection to server failed");
  });

  it("?rid= pairs the start and the end of overlapping runs", async () => {
    const url = await register("hc-rid");
    const script = `
      RID1=$(cat /proc/sys/kernel/random/uuid)
      RID2=$(cat /proc/sys/kernel/random/uuid)
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/start?rid=$RID1"
      sleep 1
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/start?rid=$RID2"
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/0?rid=$RID1"
      curl -fsS -m 10 --retry 5 -o /dev/null "$URL/0?rid=$RID2"
      echo "$RID1 $RID2"
    `;
    const result = await sh(script, { URL: url });
    expect(result.code).toBe(0);
    const [rid1, rid2] = result.stdout.trim().split(" ");
    const pings = await history("hc-rid");
    expect(pings.map((p) => [p.kind, p.runId])).toEqual([
      ["success", rid2],
      ["success", rid1],
      ["start", rid2],
      ["start", rid1],
    ]);
    // The first run started a second earlier than the second and ended first: each end found its own start.
    expect(pings[1]!.runSeconds).toBeGreaterThanOrEqual(1);
    expect(pings[0]!.runSeconds).toBeLessThan(pings[1]!.runSeconds!);
    expect((await raw("GET", `${url}?rid=not-a-uuid`)).status).toBe(400);
  });

  it("/log keeps a line in the history and changes nothing else", async () => {
    const url = await register("hc-log");
    expect((await raw("POST", `${url}/log`, "halfway there")).text).toBe("OK");
    const heartbeat = await read("hc-log");
    expect(heartbeat.lastSeenAt).toBeNull();
    expect(heartbeat.lastPing).toBeNull();
    expect(heartbeat.status).toBe("ok");
    expect(await history("hc-log")).toMatchObject([{ kind: "log", bodyBytes: 13 }]);
  });
});

describe("refusals, rotation and the key's secrecy", () => {
  it("refuses an unknown key, a malformed key, an unknown signal and a deleted heartbeat's key alike", async () => {
    const url = await register("hc-refused");
    const gone = await register("hc-gone");
    expect((await app.call("DELETE", "/o/acme/heartbeats/hc-gone", { token: cast.admin })).status).toBe(204);
    const base = url.slice(0, url.lastIndexOf("/"));
    const refusals = [`${base}/${randomUUID()}`, `${base}/not-a-key`, `${base}/${randomUUID().toUpperCase()}`, `${url}/explode`, gone, `${gone}/start`];
    for (const target of refusals) {
      for (const method of ["GET", "POST"]) {
        expect(await raw(method, target), `${method} ${target}`).toEqual({ status: 404, text: "not found", type: "text/plain; charset=utf-8" });
      }
    }
    // curl -f fails on it, as a crontab line with a wrong URL should.
    expect((await sh(`curl -fsS -m 10 -o /dev/null ${base}/${randomUUID()}`)).code).toBe(22);
    expect(await history("hc-refused")).toEqual([]);
  });

  it("rotation: a new key at once, the old one refused, audited without either key; admins only", async () => {
    const old = await register("hc-rotate");
    expect((await raw("GET", old)).text).toBe("OK");
    expect((await app.call("POST", "/o/acme/heartbeats/hc-rotate/rotate-ping-key", { token: cast.member })).status).toBe(403);
    expect((await app.call("POST", "/o/acme/heartbeats/hc-rotate/rotate-ping-key", { token: cast.otherAdmin })).status).toBe(403);
    expect((await app.call("POST", "/o/acme/heartbeats/nobody/rotate-ping-key", { token: cast.admin })).status).toBe(404);
    const rotated = await app.call("POST", "/o/acme/heartbeats/hc-rotate/rotate-ping-key", { token: cast.admin });
    expect(rotated.status).toBe(200);
    const fresh = rotated.body.pingUrl as string;
    expect(fresh).toMatch(KEY_URL);
    expect(fresh).not.toBe(old);
    expect((await read("hc-rotate")).pingUrl).toBe(fresh);
    // The old key was answered (and remembered) a moment ago; it is refused all the same.
    expect(await raw("GET", old)).toEqual({ status: 404, text: "not found", type: "text/plain; charset=utf-8" });
    expect((await raw("GET", fresh)).text).toBe("OK");
    expect((await history("hc-rotate")).length).toBe(2);

    const audit = await eventually("the rotation's audit entry", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: cast.owner });
      return res.body.events.some((e: { kind: string }) => e.kind === "heartbeat.ping_key_rotated") ? res.body : undefined;
    });
    const entry = audit.events.find((e: { kind: string }) => e.kind === "heartbeat.ping_key_rotated");
    expect(entry).toMatchObject({ actor: "admin@acme.test", data: { name: "hc-rotate" } });
    const keys = [old, fresh].map((u) => u.slice(u.lastIndexOf("/") + 1));
    for (const key of keys) expect(JSON.stringify(audit)).not.toContain(key);
  });

  it("stores no key in clear: only its hash and a sealed copy", async () => {
    const url = await register("hc-stored");
    const key = url.slice(url.lastIndexOf("/") + 1);
    const rows = await db<{ row: string }[]>`select row_to_json(h)::text as row from heartbeats.heartbeats h where name = 'hc-stored'`;
    expect(rows).toHaveLength(1);
    expect(rows[0]!.row).not.toContain(key);
    expect(rows[0]!.row).not.toContain(key.replaceAll("-", ""));
    // Nor does the audit entry of its registration.
    // (The audit log is written from the outbox, a moment after the registration.)
    const audit = await eventually("the registration's audit entry", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: cast.owner });
      return res.body.events.some((e: { kind: string; data: { name?: string } }) => e.kind === "heartbeat.registered" && e.data.name === "hc-stored")
        ? res.body
        : undefined;
    });
    expect(JSON.stringify(audit)).not.toContain(key);
  });

  it("a heartbeat registered before ping keys gets one when a process starts", async () => {
    await register("hc-older");
    // As a row written before the migration that added keys.
    await db`update heartbeats.heartbeats set ping_key_hash = null, ping_key_sealed = null, ping_key_sealed_by = null where name = 'hc-older'`;
    expect((await read("hc-older")).pingUrl).toBe("");
    // A second process on the same database (a replica, or the next start) gives it a key.
    const replica = await startApp({ databaseUrl: app.databaseUrl, env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
    try {
      const url = (await read("hc-older")).pingUrl as string;
      expect(url).toMatch(KEY_URL);
      expect((await raw("GET", url)).text).toBe("OK");
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from heartbeats.heartbeats where ping_key_hash is null`;
      expect(row!.n).toBe(0);
    } finally {
      await replica.stop();
    }
  });

  it("the ingest-token ping route is unchanged beside it", async () => {
    await register("hc-both");
    const res = await fetch(`${app.url}/o/acme/heartbeats/hc-both/ping`, { method: "POST", headers: { authorization: `Bearer ${cast.ingestToken}` } });
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    const refused = await fetch(`${app.url}/o/acme/heartbeats/hc-both/ping`, { method: "GET", headers: { authorization: `Bearer ${cast.ingestToken}` } });
    expect(refused.status).toBe(405);
  });

  it("a body over the limit is refused in plain text before anything is recorded", async () => {
    const url = await register("hc-big");
    const res = await raw("POST", url, "x".repeat(1024 * 1024 + 1));
    expect(res.status).toBe(413);
    expect(res.type).toBe("text/plain; charset=utf-8");
    expect(await history("hc-big")).toEqual([]);
  });
});

describe("Opsgenie's heartbeat ping", () => {
  it("takes the request Opsgenie's docs show, and its POST, PUT and PATCH, with its PONG", async () => {
    await register("og-nightly");
    // As Opsgenie's Heartbeat API documents it, with only the host changed.
    const result = await sh(`curl -s -w '\\n%{http_code}' -X GET "$BASE/v2/heartbeats/og-nightly/ping" --header "Authorization: GenieKey $KEY"`, {
      BASE: app.url,
      KEY: cast.ingestToken,
    });
    expect(result.code).toBe(0);
    const [body, status] = result.stdout.split("\n");
    expect(status).toBe("202");
    const answer = JSON.parse(body!);
    expect(Object.keys(answer).sort()).toEqual(["requestId", "result", "took"]);
    expect(answer.result).toBe("PONG - Heartbeat received");
    expect(typeof answer.took).toBe("number");
    expect(answer.requestId).toMatch(/^[0-9a-f-]{36}$/);
    for (const method of ["POST", "PUT", "PATCH"]) {
      const res = await fetch(`${app.url}/v2/heartbeats/og-nightly/ping`, { method, headers: { authorization: `GenieKey ${cast.ingestToken}` } });
      expect(res.status, method).toBe(202);
      expect(((await res.json()) as { result: string }).result, method).toBe("PONG - Heartbeat received");
    }
    expect((await history("og-nightly")).map((p) => p.kind)).toEqual(["success", "success", "success", "success"]);
    expect((await read("og-nightly")).lastSeenAt).not.toBeNull();
  });

  it("refuses a missing key, a wrong key, another organization's key and an unknown name alike", async () => {
    await register("og-refused");
    const attempts: [string, Record<string, string>][] = [
      ["og-refused", {}],
      ["og-refused", { authorization: `GenieKey ${"0".repeat(64)}` }],
      ["og-refused", { authorization: "GenieKey not-a-key" }],
      ["og-refused", { authorization: `GenieKey ${cast.otherIngestToken}` }],
      ["og-refused", { authorization: `Bearer ${cast.ingestToken}` }],
      ["og-nobody", { authorization: `GenieKey ${cast.ingestToken}` }],
    ];
    for (const [name, headers] of attempts) {
      const res = await fetch(`${app.url}/v2/heartbeats/${name}/ping`, { method: "GET", headers });
      const body = (await res.json()) as Record<string, unknown>;
      expect({ status: res.status, message: body.message, keys: Object.keys(body).sort() }, JSON.stringify(headers)).toEqual({
        status: 404,
        message: "not found",
        keys: ["message", "requestId", "took"],
      });
    }
    expect(await history("og-refused")).toEqual([]);
  });
});

describe("the organization's ping key with names (/ping/{org key}/{name})", () => {
  it("pings by name with every signal, and refuses an unknown key or name alike; a new key replaces the old at once", async () => {
    expect((await app.call("POST", "/o/acme/ping-key", { token: cast.member, body: {} })).status).toBe(403);
    const issued = await app.call("POST", "/o/acme/ping-key", { token: cast.admin, body: {} });
    expect(issued.status).toBe(200);
    expect(issued.body.pingKey).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(issued.body.pingUrlBase).toBe(`http://localhost:${new URL(app.url).port}/ping/${issued.body.pingKey}`);
    expect(issued.body.allowCreate).toBe(false);
    const base = issued.body.pingUrlBase as string;
    await register("by-name");
    expect((await sh(`curl -fsS -m 10 --retry 5 -o /dev/null ${base}/by-name`)).code).toBe(0);
    const rid = randomUUID();
    expect((await raw("GET", `${base}/by-name/start?rid=${rid}`)).text).toBe("OK");
    expect((await raw("POST", `${base}/by-name/1?rid=${rid}`, "exit 1")).text).toBe("OK");
    expect((await history("by-name")).map((p) => [p.kind, p.exitStatus ?? null])).toEqual([
      ["fail", 1],
      ["start", null],
      ["success", null],
    ]);
    const refused = { status: 404, text: "not found", type: "text/plain; charset=utf-8" };
    expect(await raw("GET", `${base}/nobody`)).toEqual(refused);
    expect(await raw("GET", `${base}/nobody?create=1`)).toEqual(refused);
    expect(await raw("GET", `${base.slice(0, base.lastIndexOf("/"))}/${"A".repeat(22)}/by-name`)).toEqual(refused);
    // Another organization's key does not reach acme's heartbeat.
    const other = await app.call("POST", "/o/globex/ping-key", { token: cast.otherAdmin, body: {} });
    expect(await raw("GET", `${other.body.pingUrlBase}/by-name`)).toEqual(refused);
    // Issuing again replaces the key at once; the audit names no key.
    const again = await app.call("POST", "/o/acme/ping-key", { token: cast.admin, body: {} });
    expect(await raw("GET", `${base}/by-name`)).toEqual(refused);
    expect((await raw("GET", `${again.body.pingUrlBase}/by-name`)).text).toBe("OK");
    const audit = await eventually("the key's audit entries", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: cast.owner });
      return res.body.events.filter((e: { kind: string }) => e.kind === "heartbeat.org_ping_key_issued").length >= 2 ? res.body : undefined;
    });
    for (const key of [issued.body.pingKey, again.body.pingKey]) expect(JSON.stringify(audit)).not.toContain(key);
  });

  it("?create=1 registers a name on its first ping where the organization allows it, once under concurrency", async () => {
    const issued = await app.call("POST", "/o/acme/ping-key", { token: cast.admin, body: { allowCreate: true } });
    expect(issued.body.allowCreate).toBe(true);
    const base = issued.body.pingUrlBase as string;
    // Without create=1 an unknown name is still refused.
    expect((await raw("GET", `${base}/auto-made`)).status).toBe(404);
    const answers = await Promise.all(Array.from({ length: 5 }, () => raw("POST", `${base}/auto-made?create=1`)));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 201]);
    expect(answers.find((a) => a.status === 201)!.text).toBe("Created");
    const made = await read("auto-made");
    expect(made).toMatchObject({ expectedIntervalSeconds: 86_400, graceSeconds: 3_600 });
    expect(made.pingUrl).toMatch(KEY_URL);
    expect((await history("auto-made")).length).toBe(5);
    // A name no heartbeat may have is never created.
    expect((await raw("GET", `${base}/Not%20A%20Name?create=1`)).status).toBe(404);
  });
});

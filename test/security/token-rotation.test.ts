import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OrganizationSchema, type Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import { createInProcessBroadcast } from "../../services/runtime/transport/broadcast.js";
import type { Clients } from "../../services/runtime/transport/clients.js";
import { createIngestTokenResolver, INGEST_TOKEN_REVOKED } from "../../services/runtime/credentials/ingest-token-cache.js";
import { newHexSecret, sha256, sha256Hex } from "../../services/runtime/credentials/secrets.js";
import { startApp, type TestApp } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

/** A replaced ingest token is refused at once on every replica, even across a NATS disconnect. */
const fixture = JSON.parse(readFileSync(new URL("../fixtures/datadog/custom-body-triggered.json", import.meta.url), "utf8"));
let n = 0;
const alert = () => ({ ...fixture, event_id: `rotation-outage-${n++}` });

describe("rotating the ingest token during a NATS outage", () => {
  let nats: PrivateNats;
  let app: TestApp;
  let db: postgres.Sql;

  beforeAll(async () => {
    nats = await startPrivateNats();
    app = await startApp({ nats: nats.url });
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
    await nats?.cleanup();
  });

  const ready = async () => {
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    while ((await app.call("GET", "/readyz")).status !== 200) {
      if (Date.now() > deadline) throw new Error("not ready after NATS came back");
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  it("does not trust what it cached before the disconnect once NATS is back", async () => {
    const owner = await app.ownerToken();
    const old = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    // Cached by intake.
    expect((await app.call("POST", "/triggers", { token: old, body: alert() })).status).toBe(201);
    expect((await app.call("POST", "/triggers", { token: old, body: alert() })).status).toBe(200);

    await nats.stop();
    // Meanwhile an identity replica on the other side of the outage replaces the token: the
    // database has the new one, and the revoke notice never reaches this process.
    const replacement = newHexSecret();
    await db`update identity.org_credentials set hash = ${sha256(replacement)}, issued_at = now() where kind = 'ingest_token'`;
    await nats.start();
    await ready();

    const afterOutage = await app.call("POST", "/triggers", { token: old, body: alert() });
    expect(afterOutage.status).toBe(401);
    expect((await app.call("POST", "/triggers", { token: replacement, body: alert() })).status).toBe(200);
  });
});

describe("a lookup that overlaps a revocation", () => {
  it("answers its own request but is not cached", async () => {
    const broadcast = createInProcessBroadcast();
    const org = create(OrganizationSchema, { id: "00000000-0000-0000-0000-000000000001", slug: "acme" });
    const answers: ((value: Organization) => void)[] = [];
    let calls = 0;
    // Identity's answer is held back until the revocation has been received.
    const clients = {
      identity: {
        resolveIngestToken: () => {
          calls++;
          return new Promise<Organization>((resolve) => answers.push(resolve));
        },
      },
    } as unknown as Clients;
    const resolver = createIngestTokenResolver({ clients, broadcast });
    const slow = resolver.resolve("old-token");
    await new Promise((r) => setImmediate(r));
    await broadcast.publish(INGEST_TOKEN_REVOKED, sha256Hex("old-token"));
    answers.shift()!(org);
    expect((await slow).slug).toBe("acme");
    // The next request asks identity again instead of trusting the stale answer.
    const next = resolver.resolve("old-token");
    await new Promise((r) => setImmediate(r));
    expect(calls).toBe(2);
    answers.shift()!(org);
    await next;
  });
});

describe("many requests with a token the cache does not hold", () => {
  /** Identity's lookups, held until released: how many were asked and a way to answer them. */
  function heldIdentity() {
    const answers: ((value: Organization) => void)[] = [];
    const clients = {
      identity: {
        resolveIngestToken: () => new Promise<Organization>((resolve) => answers.push(resolve)),
      },
    } as unknown as Clients;
    return { clients, answers };
  }
  const org = create(OrganizationSchema, { id: "00000000-0000-0000-0000-000000000001", slug: "acme" });

  it("ask identity once, not once each (an alert storm when the entry expires)", async () => {
    const identity = heldIdentity();
    const resolver = createIngestTokenResolver({ clients: identity.clients, broadcast: createInProcessBroadcast() });
    const waiting = Array.from({ length: 50 }, () => resolver.resolve("storm-token"));
    await new Promise((r) => setImmediate(r));
    expect(identity.answers).toHaveLength(1);
    identity.answers.shift()!(org);
    expect((await Promise.all(waiting)).every((o) => o.slug === "acme")).toBe(true);
  });

  it("do not share a lookup that began before a revocation with a request that began after it", async () => {
    const identity = heldIdentity();
    const broadcast = createInProcessBroadcast();
    const resolver = createIngestTokenResolver({ clients: identity.clients, broadcast });
    const before = resolver.resolve("rotated-token");
    await new Promise((r) => setImmediate(r));
    await broadcast.publish(INGEST_TOKEN_REVOKED, sha256Hex("rotated-token"));
    const after = resolver.resolve("rotated-token");
    await new Promise((r) => setImmediate(r));
    expect(identity.answers).toHaveLength(2);
    identity.answers.shift()!(org);
    expect((await before).slug).toBe("acme");
    // Identity, asked after the rotation, no longer knows the token.
    identity.answers.shift()!(undefined as unknown as Organization);
    await expect(after).rejects.toThrow("Invalid trigger ingest token");
  });

  it("a caller that gives up leaves the others' lookup running", async () => {
    const identity = heldIdentity();
    const resolver = createIngestTokenResolver({ clients: identity.clients, broadcast: createInProcessBroadcast() });
    const impatient = new AbortController();
    const first = resolver.resolve("shared-token", impatient.signal);
    const second = resolver.resolve("shared-token");
    await new Promise((r) => setImmediate(r));
    impatient.abort(new Error("the caller gave up"));
    await expect(first).rejects.toThrow("the call was canceled");
    identity.answers.shift()!(org);
    expect((await second).slug).toBe("acme");
  });
});

describe("a fresh ingest token under a burst of deliveries", () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.stop();
  });

  /** Identity's token lookups the app has made so far, from its metrics. */
  const lookups = async () => {
    const text = await (await fetch(app.process.metricsUrl!)).text();
    const line =
      /warroom_rpc_duration_seconds_count\{method="warroom\.identity\.v1\.IdentityService\/ResolveIngestToken",transport="in-memory",code="ok"\} (\d+)/.exec(
        text,
      );
    return Number(line?.[1] ?? 0);
  };

  it("costs identity one lookup, however many deliveries carry it at once", async () => {
    const owner = await app.ownerToken();
    const token = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    const before = await lookups();
    const answers = await Promise.all(Array.from({ length: 50 }, () => app.call("POST", "/triggers", { token, body: alert() })));
    expect(answers.every((a) => a.status === 201 || a.status === 200)).toBe(true);
    expect((await lookups()) - before).toBe(1);
  });
});

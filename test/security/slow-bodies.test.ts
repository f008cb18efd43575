import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Code, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { startApp, type TestApp } from "../support/app.js";
import { issueCredentials, postTrigger, unique, type Credentials } from "../e2e/triggers-kit.js";

/**
 * Deliveries whose senders send their headers and then drip the body must not stop anyone else's
 * deliveries: a delivery takes an in-flight slot only once its body is read (and intake takes its
 * organization's share only once the credential is checked), and the bodies one client address (or
 * one HTTP/2 connection) may have being read at once are bounded, so a slow sender holds only its
 * own reading slots. The attackers send no credential and come from addresses of their own; the
 * healthy sender is 127.0.0.1 over HTTP/1.1.
 */
const PER_ADDRESS = 8;
const PER_CONNECTION = 4;
const PROXY = "127.0.0.6";
/** Longest the test waits for the server to have taken every attacking request in; a hang bound, not a budget. */
const SETTLE_BOUND_MS = 10_000;

const alertBody = (run: string, i: number) => ({
  title: `Slow-body probe ${run} ${i}`,
  body: "a healthy delivery while others drip theirs",
  alert_id: `${run}-${i}`,
  alert_transition: "Triggered",
  alert_type: "error",
  alert_priority: "P3",
  event_id: `${run}-e${i}`,
  tags: ["service:slow-bodies"],
});

/** The sum of a metric's series whose labels contain every `labels` pair (0 when none is there). */
async function metric(app: TestApp, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(app.process.metricsUrl!)).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    const match = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    if (Object.entries(labels).every(([k, v]) => (match[2] ?? "").includes(`${k}="${v}"`))) sum += Number(match[3]);
  }
  return sum;
}

/** Waits until `held()` is true or the bound passes: the attack is then in place (or never will be). */
async function settle(held: () => Promise<boolean>): Promise<void> {
  for (const until = Date.now() + SETTLE_BOUND_MS; Date.now() < until; ) {
    if (await held().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A raw HTTP/1.1 request from `localAddress` that sends its headers and the body's first byte, then holds. */
function slowHttp1(port: number, localAddress: string, path: string, headers: Record<string, string>) {
  const socket = net.connect({ host: "127.0.0.1", port, localAddress });
  let answer = "";
  socket.on("error", () => {});
  socket.on("data", (chunk: Buffer) => {
    answer += chunk.toString("latin1");
  });
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  socket.on("connect", () => {
    const lines = Object.entries({ host: "x", "content-length": "4096", ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.write(`POST ${path} HTTP/1.1\r\n${lines.join("")}\r\n{`);
  });
  return {
    closed,
    /** The status line of the answer, if one came. */
    status: () => /^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1],
    answer: () => answer,
    destroy: () => socket.destroy(),
  };
}

describe("slow senders of delivery bodies", () => {
  let app: TestApp;
  let creds: Credentials;
  const cleanups: (() => void)[] = [];

  beforeAll(async () => {
    app = await startApp({
      env: {
        DELIVERY_BODY_READS_PER_ADDRESS: String(PER_ADDRESS),
        DELIVERY_BODY_READS_PER_CONNECTION: String(PER_CONNECTION),
        // A load balancer on its own loopback address, naming its clients in X-Forwarded-For.
        TRUSTED_PROXY_CIDRS: `${PROXY}/32`,
      },
    });
    creds = await issueCredentials(app);
  }, 180_000);

  // Each test's attackers end with it, whatever its result: the next test starts from a quiet port.
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) cleanup();
    await expect.poll(() => metric(app, "warroom_delivery_bodies_reading")).toBe(0);
  });

  afterAll(async () => {
    await app?.stop();
  });

  it("256 HTTP/1.1 connections dripping delivery bodies from one address leave everyone else's deliveries answered", async () => {
    const port = Number(new URL(app.url).port);
    const attackers = Array.from({ length: 256 }, () => slowHttp1(port, "127.0.0.2", "/triggers", { "content-type": "application/json" }));
    cleanups.push(() => {
      for (const a of attackers) a.destroy();
    });
    // Every attacking request is either being read or was refused for its sender's other reads.
    await settle(
      async () =>
        (await metric(app, "warroom_delivery_bodies_reading")) + (await metric(app, "warroom_trigger_deliveries_refused_total", { reason: "slow-sender" })) >=
        256,
    );

    const run = unique("h1");
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => postTrigger(app, creds.ingestToken, alertBody(run, i))));
    expect(answers.map((a) => `${a.status} ${JSON.stringify(a.body).slice(0, 200)}`)).toEqual(Array(10).fill(expect.stringMatching(/^201 /)));
    // The same over Connect, from the same healthy address.
    const connect = await app.call("POST", "/warroom.intake.v1.IntakeService/Deliver", {
      body: { body: Buffer.from(JSON.stringify(alertBody(run, 10))).toString("base64"), contentType: "application/json" },
      headers: { "connect-protocol-version": "1", authorization: `Bearer ${creds.ingestToken}` },
    });
    expect(connect.status, JSON.stringify(connect.body)).toBe(200);

    // The slow sender holds its own reading slots and no more; the rest of its requests were
    // answered at once, in the status the route's senders retry, with Retry-After, and counted
    // as slow senders, not as overload.
    expect(await metric(app, "warroom_delivery_bodies_reading")).toBe(PER_ADDRESS);
    // Their answers were sent before they were counted; they may still be on the way.
    await expect.poll(() => attackers.filter((a) => a.status() !== undefined).length).toBe(256 - PER_ADDRESS);
    const refused = attackers.filter((a) => a.status() !== undefined);
    expect(new Set(refused.map((a) => a.status()))).toEqual(new Set(["503"]));
    expect(refused[0]!.answer()).toMatch(/retry-after: 1/i);
    expect(refused[0]!.answer()).toContain("still sending");
    expect(await metric(app, "warroom_trigger_deliveries_refused_total", { reason: "slow-sender" })).toBe(256 - PER_ADDRESS);
    expect(await metric(app, "warroom_trigger_deliveries_refused_total", { reason: "overload" })).toBe(0);

    for (const a of attackers) a.destroy();
    await Promise.all(attackers.map((a) => a.closed));
    // Once they are gone, their reading slots are free again.
    await expect.poll(() => metric(app, "warroom_delivery_bodies_reading")).toBe(0);
  });

  it("three h2c connections with many dripping streams hold only their connections' reading slots", async () => {
    const port = Number(new URL(app.url).port);
    const refusedSoFar = async () =>
      (await metric(app, "warroom_trigger_deliveries_refused_total", { reason: "slow-connection" })) +
      (await metric(app, "warroom_trigger_deliveries_refused_total", { reason: "slow-sender" }));
    const before = await refusedSoFar();
    const sessions = Array.from({ length: 3 }, () =>
      http2.connect(`http://127.0.0.1:${port}`, { createConnection: () => net.connect({ host: "127.0.0.1", port, localAddress: "127.0.0.3" }) }),
    );
    cleanups.push(() => {
      for (const s of sessions) s.destroy();
    });
    const statuses: Promise<number>[] = [];
    let responded = 0;
    for (const session of sessions) {
      session.on("error", () => {});
      for (let i = 0; i < 100; i++) {
        const stream = session.request({ ":method": "POST", ":path": "/triggers", "content-type": "application/json", "content-length": "4096" });
        stream.on("error", () => {});
        stream.write("{");
        statuses.push(
          new Promise<number>((r) => {
            stream.once("response", (headers) => {
              responded++;
              r(Number(headers[":status"]));
            });
            stream.once("close", () => r(0));
          }),
        );
      }
    }
    await settle(async () => (await metric(app, "warroom_delivery_bodies_reading")) + (await refusedSoFar()) - before >= 300);

    const run = unique("h2");
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => postTrigger(app, creds.ingestToken, alertBody(run, i))));
    expect(answers.map((a) => `${a.status} ${JSON.stringify(a.body).slice(0, 200)}`)).toEqual(Array(10).fill(expect.stringMatching(/^201 /)));
    // At most PER_CONNECTION streams of each connection are being read.
    expect(await metric(app, "warroom_delivery_bodies_reading")).toBeLessThanOrEqual(3 * PER_CONNECTION);
    expect(await refusedSoFar()).toBeGreaterThanOrEqual(before + 300 - 3 * PER_CONNECTION);

    // Every stream past the bounds is answered at once, before its body is read.
    await expect.poll(() => responded).toBeGreaterThanOrEqual(300 - 3 * PER_CONNECTION);
    for (const s of sessions) s.destroy();
    const answered = await Promise.all(statuses);
    // Every refused stream was answered at once, in the status the shared route's senders retry.
    expect(answered.filter((s) => s === 503).length).toBeGreaterThanOrEqual(300 - 3 * PER_CONNECTION);
    await expect.poll(() => metric(app, "warroom_delivery_bodies_reading")).toBe(0);
  });

  it("bounds slow Connect bodies from one address the same way, answering resource_exhausted", async () => {
    const port = Number(new URL(app.url).port);
    const attackers = Array.from({ length: 3 * PER_ADDRESS }, () =>
      slowHttp1(port, "127.0.0.4", "/warroom.intake.v1.IntakeService/Deliver", { "content-type": "application/json", "connect-protocol-version": "1" }),
    );
    cleanups.push(() => {
      for (const a of attackers) a.destroy();
    });
    await expect.poll(() => attackers.filter((a) => a.status() !== undefined).length).toBe(2 * PER_ADDRESS);
    const refused = attackers.filter((a) => a.status() !== undefined);
    expect(refused.length).toBe(2 * PER_ADDRESS);
    expect(new Set(refused.map((a) => a.status()))).toEqual(new Set(["429"]));
    expect(refused[0]!.answer()).toContain('"code":"resource_exhausted"');
    expect(refused[0]!.answer()).toMatch(/retry-after: 1/i);

    const run = unique("connect");
    const answers = await Promise.all(Array.from({ length: 3 }, (_, i) => postTrigger(app, creds.ingestToken, alertBody(run, i))));
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201]);
    for (const a of attackers) a.destroy();
    await expect.poll(() => metric(app, "warroom_delivery_bodies_reading")).toBe(0);
  });

  it("answers gRPC streams past a connection's bound with RESOURCE_EXHAUSTED, trailers only, and serves gRPC again once they end", async () => {
    const port = Number(new URL(app.url).port);
    const session = http2.connect(`http://127.0.0.1:${port}`, { createConnection: () => net.connect({ host: "127.0.0.1", port, localAddress: "127.0.0.5" }) });
    session.on("error", () => {});
    cleanups.push(() => session.destroy());
    const answers: Promise<http2.IncomingHttpHeaders | undefined>[] = [];
    let responded = 0;
    for (let i = 0; i < 2 * PER_CONNECTION; i++) {
      const stream = session.request({
        ":method": "POST",
        ":path": "/warroom.intake.v1.IntakeService/Deliver",
        "content-type": "application/grpc+proto",
        te: "trailers",
      });
      stream.on("error", () => {});
      // A gRPC message's five-byte prefix announcing 4 KiB, then nothing.
      stream.write(Buffer.from([0, 0, 0, 16, 0]));
      answers.push(
        new Promise((r) => {
          stream.once("response", (headers) => {
            responded++;
            r(headers);
          });
          stream.once("close", () => r(undefined));
        }),
      );
    }
    await settle(async () => responded >= PER_CONNECTION && (await metric(app, "warroom_delivery_bodies_reading")) >= PER_CONNECTION);
    session.destroy();
    const refused = (await Promise.all(answers)).filter((h): h is http2.IncomingHttpHeaders => h !== undefined);
    expect(refused.length).toBe(PER_CONNECTION);
    for (const headers of refused) {
      expect(headers[":status"]).toBe(200);
      expect(headers["grpc-status"]).toBe(String(Code.ResourceExhausted));
      expect(decodeURIComponent(String(headers["grpc-message"]))).toContain("still sending delivery bodies");
    }
    await expect.poll(() => metric(app, "warroom_delivery_bodies_reading")).toBe(0);

    const client = createClient(IntakeService, createGrpcTransport({ baseUrl: app.url }));
    const run = unique("grpc");
    const delivered = await client.deliver(
      { body: Buffer.from(JSON.stringify(alertBody(run, 0))), contentType: "application/json" },
      { headers: { authorization: `Bearer ${creds.ingestToken}` } },
    );
    expect(delivered.outcome).toBe("opened");
  });

  it("counts a trusted proxy's clients each by the address it names, so a slow client behind it does not hold the others' slots", async () => {
    const port = Number(new URL(app.url).port);
    const slowClient = Array.from({ length: 2 * PER_ADDRESS }, () =>
      slowHttp1(port, PROXY, "/triggers", { "content-type": "application/json", "x-forwarded-for": "203.0.113.7" }),
    );
    cleanups.push(() => {
      for (const a of slowClient) a.destroy();
    });
    await expect.poll(() => slowClient.filter((a) => a.status() !== undefined).length).toBe(PER_ADDRESS);
    expect(new Set(slowClient.map((a) => a.status()).filter(Boolean))).toEqual(new Set(["503"]));

    // Another client of the same proxy, on a connection of its own from the proxy's address.
    const run = unique("proxy");
    const body = JSON.stringify(alertBody(run, 0));
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(
        {
          host: "127.0.0.1",
          port,
          localAddress: PROXY,
          agent: false,
          method: "POST",
          path: "/triggers",
          headers: { "content-type": "application/json", authorization: `Bearer ${creds.ingestToken}`, "x-forwarded-for": "203.0.113.8" },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        },
      );
      req.on("error", reject);
      req.end(body);
    });
    expect(status).toBe(201);
  });
});

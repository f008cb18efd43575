import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { LOGIN_THROTTLE } from "../../services/identity/login-throttle.js";
import { OWNER, startApp, type TestApp } from "../support/app.js";

/**
 * Connection-level robustness of the public port: HTTP/2 clients are told apart by their address,
 * a full connection cap answers 503 (and still serves the probes and the metrics port), and a
 * client that never reads its answers is closed after the send timeout. Every loopback address in
 * 127.0.0.0/8 is a distinct client here.
 */

/** One call over its own cleartext HTTP/2 connection from `localAddress`: status, headers and JSON body. */
async function h2c(
  url: string,
  localAddress: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any }> {
  const session = http2.connect(url, { localAddress } as http2.SecureClientSessionOptions);
  session.on("error", () => {});
  try {
    return await new Promise((resolve, reject) => {
      const req = session.request({
        ":method": method,
        ":path": path,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      });
      let status = 0;
      let text = "";
      req.setEncoding("utf8");
      req.on("response", (h) => {
        status = Number(h[":status"]);
      });
      req.on("data", (chunk: string) => {
        text += chunk;
      });
      req.on("end", () => resolve({ status, body: text ? JSON.parse(text) : null }));
      req.on("error", reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  } finally {
    session.close();
  }
}

/** One HTTP/1.1 call on a connection of its own: status, retry-after and body, or the socket error. */
function h1(
  url: string,
  method: string,
  path: string,
  localAddress = "127.0.0.1",
): Promise<{ status: number; retryAfter?: string; body: string; error?: string }> {
  return new Promise((resolve) => {
    const req = http.request(`${url}${path}`, { method, agent: false, localAddress, timeout: 60_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"], body }));
    });
    req.on("timeout", () => req.destroy(new Error("no answer in 60 s")));
    req.on("error", (err) => resolve({ status: 0, body: "", error: err.message }));
    req.end();
  });
}

describe("TRUSTED_PROXY_CIDRS over h2c", () => {
  let app: TestApp;
  let db: postgres.Sql;

  beforeAll(async () => {
    app = await startApp({ env: { TRUSTED_PROXY_CIDRS: "127.0.0.7/32" } });
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
  });

  it("believes the forwarding header of a trusted proxy's HTTP/2 connection, and only its", async () => {
    const send = (from: string, forwarded: string, id: string) =>
      h2c(
        app.url,
        from,
        "POST",
        "/triggers/chat/acme",
        { channel_id: "C-proxy", message_id: id, text: "guess" },
        { "x-service-chat-secret": "e".repeat(64), "x-forwarded-for": forwarded },
      );
    const latest = async () =>
      (
        await db<{ data: { remoteAddress: string } }[]>`
          select data from identity.audit_events where kind = 'receiver.auth_failed' order by id desc limit 1`
      )[0]!.data.remoteAddress;
    expect((await send("127.0.0.7", "192.0.2.9", "m-1")).status).toBe(401);
    expect(await latest()).toBe("192.0.2.9");
    expect((await send("127.0.0.8", "192.0.2.10", "m-2")).status).toBe(401);
    expect(await latest()).toBe("127.0.0.8");
  });
});

describe("a full connection cap", () => {
  const CAP = 12;
  let app: TestApp;
  const held: net.Socket[] = [];

  beforeAll(async () => {
    app = await startApp({ env: { HTTP_MAX_CONNECTIONS: String(CAP), HTTP_MAX_CONNECTIONS_PER_ADDRESS: "4", HTTP_HEADERS_TIMEOUT_SECONDS: "120" } });
  });
  afterAll(async () => {
    for (const socket of held) socket.destroy();
    await app?.stop();
  });

  /** A connection that started a request and drips nothing more: it holds its slot until the headers deadline. */
  async function hold(localAddress: string): Promise<net.Socket> {
    const socket = net.connect({ host: "127.0.0.1", port: Number(new URL(app.url).port), localAddress });
    socket.on("error", () => {});
    await new Promise((r) => socket.once("connect", r));
    socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\n");
    held.push(socket);
    return socket;
  }

  it("answers 503 with Retry-After past the cap, serves /healthz and /readyz from the reserve, and the metrics port still answers", async () => {
    // Three addresses at the per-address cap (4) fill the port-wide cap (12).
    for (let i = 0; i < CAP; i++) await hold(`127.0.1.${1 + Math.floor(i / 4)}`);
    // The server has seen every held connection's bytes once a further one from a held address is refused.
    await expect.poll(async () => (await h1(app.url, "GET", "/o/acme/incidents", "127.0.1.1")).status).toBe(503);

    const refused = await h1(app.url, "POST", "/triggers");
    expect(refused.error).toBeUndefined();
    expect(refused.status).toBe(503);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(refused.body).error).toMatch(/too many connections/);

    const perAddress = await h1(app.url, "GET", "/healthz", "127.0.1.2");
    expect(perAddress.status, perAddress.error).toBe(200);

    const probes = await Promise.all([h1(app.url, "GET", "/healthz"), h1(app.url, "GET", "/readyz"), h1(app.url, "GET", "/healthz", "127.0.2.1")]);
    expect(probes.map((p) => p.status)).toEqual([200, 200, 200]);

    const metrics = await fetch(app.process.metricsUrl!);
    expect(metrics.status).toBe(200);

    // HTTP/2: the connection is turned away with GOAWAY before any stream, which a client may retry.
    const session = http2.connect(app.url, { localAddress: "127.0.2.2" } as http2.SecureClientSessionOptions);
    session.on("error", () => {});
    const goaway = await new Promise<{ code: number; data: string } | "closed">((resolve) => {
      session.once("goaway", (code, _last, data) => resolve({ code, data: data?.toString() ?? "" }));
      session.once("close", () => resolve("closed"));
    });
    session.destroy();
    expect(goaway).toMatchObject({ data: expect.stringMatching(/too many connections/) });

    // Freed slots are served again.
    for (const socket of held.splice(0)) socket.destroy();
    await expect.poll(async () => (await h1(app.url, "GET", "/o/acme/incidents")).status).toBe(401);
  });
});

describe("slow readers", () => {
  let app: TestApp;

  beforeAll(async () => {
    // Keep-alive, request and HTTP/2 idle deadlines far past the hang bound below: the send timeout alone closes these.
    app = await startApp({
      env: { HTTP_SEND_TIMEOUT_SECONDS: "2", HTTP_KEEPALIVE_TIMEOUT_SECONDS: "600", HTTP2_IDLE_TIMEOUT_SECONDS: "600", HTTP_BODY_TIMEOUT_SECONDS: "600" },
    });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it("closes HTTP/1.1 connections that pipeline requests and never read the answers", async () => {
    const port = Number(new URL(app.url).port);
    const READERS = 3;
    // Enough pipelined requests that their answers fill the kernel's buffers and the server's.
    const requests = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".repeat(100_000);
    const closed = await Promise.all(
      Array.from(
        { length: READERS },
        () =>
          new Promise<boolean>((resolve) => {
            const socket = net.connect({ host: "127.0.0.1", port, localAddress: "127.0.3.1" });
            socket.pause();
            socket.on("error", () => {});
            socket.once("connect", () => socket.write(requests));
            // Writes keep coming (a request at a time), so the client notices the server's close.
            const poke = setInterval(() => socket.writable && socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"), 500);
            const bound = setTimeout(() => {
              socket.destroy();
              resolve(false);
            }, 120_000);
            socket.once("close", () => {
              clearInterval(poke);
              clearTimeout(bound);
              resolve(true);
            });
          }),
      ),
    );
    expect(closed.filter(Boolean).length).toBe(READERS);
    expect((await h1(app.url, "GET", "/healthz", "127.0.3.1")).status).toBe(200);
  }, 180_000);

  it("closes an HTTP/2 session that never opens its flow-control window", async () => {
    const session = http2.connect(app.url, { settings: { initialWindowSize: 0 } });
    session.on("error", () => {});
    const req = session.request({ ":path": "/healthz" });
    req.on("error", () => {});
    const status = await new Promise<number>((resolve) => req.once("response", (h) => resolve(Number(h[":status"]))));
    expect(status).toBe(200);
    const closed = await new Promise<boolean>((resolve) => {
      const bound = setTimeout(() => resolve(false), 60_000);
      session.once("close", () => {
        clearTimeout(bound);
        resolve(true);
      });
    });
    session.destroy();
    expect(closed).toBe(true);
  }, 180_000);
});

describe("HTTP/2 clients are told apart by their address", () => {
  let app: TestApp;
  let db: postgres.Sql;
  let chatSecret: string;

  beforeAll(async () => {
    app = await startApp();
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    const owner = await app.ownerToken();
    chatSecret = (await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner, body: {} })).body.secret;
    expect(chatSecret).toBeTruthy();
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
  });

  it("a stranger's wrong logins over h2c do not make correct h2c and gRPC logins from other addresses answer 429", async () => {
    const stranger = "127.0.0.2";
    const login = (from: string, email: string, password: string) => h2c(app.url, from, "POST", "/auth/login", { email, password, orgSlug: OWNER.org });
    // The stranger guesses at many accounts, two at a time, for as long as the real logins go on:
    // past the address's free failures its own address is locked, again each time the lock ends.
    let guessing = true;
    const strangerStatuses: number[] = [];
    const workers = Array.from({ length: 2 }, async (_, w) => {
      for (let i = 0; guessing; i++) strangerStatuses.push((await login(stranger, `nobody-${w}-${i}@acme.test`, "guess")).status);
    });
    // A busy hashing queue may ask for a retry ("too many password checks": the machine is
    // shared), and each refusal counts against the (account, address) pair's five free failures;
    // a lock for another address's failed logins is what must not happen.
    const retryWhileBusy = async (attempt: () => Promise<string>) => {
      let outcome = await attempt();
      for (let retry = 0; retry < 3 && /password checks/.test(outcome); retry++) {
        await new Promise((r) => setTimeout(r, 3000));
        outcome = await attempt();
      }
      return outcome;
    };
    const good: string[] = [];
    try {
      // Twenty hashed failures first: minutes on a loaded machine, so a hang bound, not a budget.
      await expect.poll(() => strangerStatuses.filter((s) => s === 429).length, { timeout: 240_000 }).toBeGreaterThan(0);
      for (let i = 0; i < 3; i++) {
        // Each round from addresses of its own, the gRPC client on its own HTTP/2 connection.
        const grpc = createClient(
          IdentityService,
          createGrpcTransport({ baseUrl: app.url, nodeOptions: { localAddress: `127.0.0.${40 + i}` } as http2.ClientSessionOptions }),
        );
        good.push(
          await retryWhileBusy(async () => {
            const res = await login(`127.0.0.${30 + i}`, OWNER.email, OWNER.password);
            return res.status === 200 ? "h2c 200" : `h2c ${res.status} ${JSON.stringify(res.body)}`;
          }),
        );
        good.push(
          await retryWhileBusy(() =>
            grpc.login({ email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org }).then(
              (answer) => (answer.accessToken ? "grpc ok" : "grpc no token"),
              (err: Error) => `grpc ${err.message}`,
            ),
          ),
        );
      }
    } finally {
      guessing = false;
      await Promise.all(workers);
    }
    expect(good).toEqual(Array(3).fill(["h2c 200", "grpc ok"]).flat());
    expect(strangerStatuses.filter((s) => s !== 401 && s !== 429)).toEqual([]);
    expect(strangerStatuses.filter((s) => s === 401).length).toBeGreaterThanOrEqual(LOGIN_THROTTLE.addressFreeFailures);
  }, 400_000);

  it("the audit log records an h2c client's address", async () => {
    const from = "127.0.0.5";
    const res = await h2c(
      app.url,
      from,
      "POST",
      "/triggers/chat/acme",
      { channel_id: "C-h2c", message_id: "m-h2c", text: "guess" },
      { "x-service-chat-secret": "e".repeat(64) },
    );
    expect(res.status).toBe(401);
    const [row] = await db<{ data: { remoteAddress: string } }[]>`
      select data from identity.audit_events where kind = 'receiver.auth_failed' order by id desc limit 1`;
    expect(row!.data.remoteAddress).toBe(from);
  });

  it("a forwarding header over h2c from an untrusted peer is replaced by the peer's address", async () => {
    const res = await h2c(
      app.url,
      "127.0.0.6",
      "POST",
      "/triggers/chat/acme",
      { channel_id: "C-h2c", message_id: "m-h2c-2", text: "guess" },
      { "x-service-chat-secret": "e".repeat(64), "x-forwarded-for": "192.0.2.200" },
    );
    expect(res.status).toBe(401);
    const [row] = await db<{ data: { remoteAddress: string } }[]>`
      select data from identity.audit_events where kind = 'receiver.auth_failed' order by id desc limit 1`;
    expect(row!.data.remoteAddress).toBe("127.0.0.6");
  });
});

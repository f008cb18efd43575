import { execFileSync } from "node:child_process";
import { X509Certificate, generateKeyPairSync, randomBytes, sign } from "node:crypto";
import type { LookupAddress, LookupOptions } from "node:dns";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import https from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createAddressPolicy } from "./address-policy.js";
import { createEgressClient, type HostResolver } from "./egress-client.js";
import { EgressError, type EgressErrorReason } from "./egress-error.js";

/* ------------------------------------------------------------------------------------------------
 * Safety net: these tests must only ever connect to loopback. Every outgoing socket is checked
 * before it connects, including the address a custom lookup hands it, and a violation both
 * blocks the connection and fails the suite.
 * ---------------------------------------------------------------------------------------------- */

const nonLoopbackAttempts: string[] = [];
const originalSocketConnect = net.Socket.prototype.connect;

function isLoopback(address: string): boolean {
  if (net.isIPv4(address)) return address.startsWith("127.");
  return address === "::1" || /^::ffff:127\./i.test(address);
}

function guardLookup(original: NonNullable<net.TcpSocketConnectOpts["lookup"]>): net.TcpSocketConnectOpts["lookup"] {
  return (hostname: string, options: LookupOptions, callback) => {
    original(hostname, options, (error, address, family) => {
      const answers = typeof address === "string" ? [address] : (address as LookupAddress[]).map((entry) => entry.address);
      const outside = answers.filter((answer) => !isLoopback(answer));
      if (!error && outside.length > 0) {
        nonLoopbackAttempts.push(`${hostname} -> ${outside.join(", ")}`);
        callback(new Error(`test guard: refusing to connect to ${outside.join(", ")}`), "", 4);
        return;
      }
      callback(error, address, family);
    });
  };
}

function installLoopbackOnlyGuard(): void {
  net.Socket.prototype.connect = function guardedConnect(this: net.Socket, ...args: unknown[]) {
    // node:net calls this with either (options, callback) or one already-normalized [options, callback] array.
    const first = Array.isArray(args[0]) ? (args[0] as unknown[])[0] : args[0];
    if (first && typeof first === "object" && !("path" in first && (first as { path?: unknown }).path)) {
      const options = first as net.TcpSocketConnectOpts;
      const host = options.host ?? "localhost";
      if (net.isIP(host)) {
        if (!isLoopback(host)) {
          nonLoopbackAttempts.push(host);
          throw new Error(`test guard: refusing to connect to ${host}`);
        }
      } else if (options.lookup) {
        options.lookup = guardLookup(options.lookup);
      } else if (host !== "localhost") {
        nonLoopbackAttempts.push(host);
        throw new Error(`test guard: refusing to resolve ${host} through system DNS`);
      }
    }
    return (originalSocketConnect as (...connectArgs: unknown[]) => net.Socket).apply(this, args);
  } as typeof net.Socket.prototype.connect;
}

/* ------------------------------------------------------------------------------------------------
 * A self-signed certificate for the HTTPS receiver: openssl when it is there, otherwise a small
 * DER builder over node:crypto, which is also exercised on its own below.
 * ---------------------------------------------------------------------------------------------- */

interface TestCertificate {
  cert: string;
  key: string;
  source: "openssl" | "node-crypto";
}

const CERTIFICATE_NAMES = ["receiver.test", "rebind.test", "rebind-private.test", "localhost"];
const CERTIFICATE_IPS = ["127.0.0.1"];

function certificateFromOpenssl(): TestCertificate | undefined {
  const directory = mkdtempSync(join(tmpdir(), "egress-cert-"));
  try {
    const subjectAltName = [...CERTIFICATE_NAMES.map((name) => `DNS:${name}`), ...CERTIFICATE_IPS.map((ip) => `IP:${ip}`)].join(",");
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        join(directory, "key.pem"),
        "-out",
        join(directory, "cert.pem"),
        "-days",
        "1",
        "-subj",
        "/CN=egress-test-receiver",
        "-addext",
        `subjectAltName=${subjectAltName}`,
      ],
      { stdio: "ignore", timeout: 10_000 },
    );
    return {
      cert: readFileSync(join(directory, "cert.pem"), "utf8"),
      key: readFileSync(join(directory, "key.pem"), "utf8"),
      source: "openssl",
    };
  } catch {
    return undefined; // no openssl, or one without -addext: fall back to node:crypto
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}

function derLength(length: number): Buffer {
  if (length < 0x80) return Buffer.from([length]);
  const bytes: number[] = [];
  for (let rest = length; rest > 0; rest >>= 8) bytes.unshift(rest & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function der(tag: number, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([Buffer.from([tag]), derLength(body.length), body]);
}

function derOid(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split(".").map(Number);
  const bytes = [40 * first + second];
  for (const value of rest) {
    const encoded = [value & 0x7f];
    for (let high = value >> 7; high > 0; high >>= 7) encoded.unshift((high & 0x7f) | 0x80);
    bytes.push(...encoded);
  }
  return der(0x06, Buffer.from(bytes));
}

function certificateFromNodeCrypto(): TestCertificate {
  const sequence = (...parts: Buffer[]) => der(0x30, ...parts);
  const utcTime = (date: Date) => der(0x17, Buffer.from(`${date.toISOString().replace(/[-:T]/g, "").slice(2, 14)}Z`));
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const ecdsaWithSha256 = sequence(derOid("1.2.840.10045.4.3.2"));
  const name = sequence(der(0x31, sequence(derOid("2.5.4.3"), der(0x0c, Buffer.from("egress-test-receiver")))));
  const serial = randomBytes(8);
  serial[0] = (serial[0] ?? 0) & 0x7f; // a positive INTEGER
  const now = Date.now();
  const subjectAltName = sequence(
    derOid("2.5.29.17"),
    der(
      0x04,
      sequence(
        ...CERTIFICATE_NAMES.map((dnsName) => der(0x82, Buffer.from(dnsName))),
        ...CERTIFICATE_IPS.map((ip) => der(0x87, Buffer.from(ip.split(".").map(Number)))),
      ),
    ),
  );
  const basicConstraints = sequence(derOid("2.5.29.19"), der(0x04, sequence(der(0x01, Buffer.from([0xff])))));
  const toBeSigned = sequence(
    der(0xa0, der(0x02, Buffer.from([2]))), // X.509 v3
    der(0x02, serial),
    ecdsaWithSha256,
    name,
    sequence(utcTime(new Date(now - 60_000)), utcTime(new Date(now + 86_400_000))),
    name,
    publicKey.export({ type: "spki", format: "der" }),
    der(0xa3, sequence(subjectAltName, basicConstraints)),
  );
  const certificate = sequence(toBeSigned, ecdsaWithSha256, der(0x03, Buffer.from([0]), sign("sha256", toBeSigned, privateKey)));
  const base64Lines = certificate.toString("base64").match(/.{1,64}/g) ?? [];
  return {
    cert: `-----BEGIN CERTIFICATE-----\n${base64Lines.join("\n")}\n-----END CERTIFICATE-----\n`,
    key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    source: "node-crypto",
  };
}

/* ------------------------------------------------------------------------------------------------
 * Loopback servers: canaries that must never be reached, and one HTTPS receiver.
 * ---------------------------------------------------------------------------------------------- */

interface Canary {
  host: string;
  port: number;
  connections: () => number;
  close: () => Promise<void>;
}

async function startCanary(host: string, port = 0): Promise<Canary | undefined> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.destroy();
  });
  const listening = await new Promise<boolean>((resolve) => {
    server.once("error", () => resolve(false));
    server.listen(port, host, () => resolve(true));
  });
  if (!listening) return undefined;
  return {
    host,
    port: (server.address() as net.AddressInfo).port,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

interface ReceivedRequest {
  method: string;
  path: string;
  host: string | undefined;
  servername: string | false | null | undefined;
  body: string;
  clientCertificateAuthorized: boolean;
  /** The client's side of the connection: the same port means the same connection. */
  remotePort: number | undefined;
}

interface Receiver {
  port: number;
  received: ReceivedRequest[];
  /** TLS connections accepted so far, and those still open. */
  connectionsAccepted: () => number;
  connectionsOpen: () => number;
  close: () => Promise<void>;
}

const BIG_RESPONSE_BYTES = 1024 * 1024;

async function startReceiver(certificate: TestCertificate, redirectTarget: () => string, extra: https.ServerOptions = {}): Promise<Receiver> {
  const received: ReceivedRequest[] = [];
  const pendingTimers = new Set<NodeJS.Timeout>();
  const handle = (request: IncomingMessage, response: ServerResponse, body: string) => {
    const socket = request.socket as TLSSocket;
    const path = request.url ?? "/";
    received.push({
      method: request.method ?? "",
      path,
      host: request.headers.host,
      servername: socket.servername,
      body,
      clientCertificateAuthorized: socket.authorized,
      remotePort: socket.remotePort,
    });
    if (path.startsWith("/hook")) {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ ok: true, length: body.length }));
    } else if (path === "/redirect-out") {
      response.writeHead(302, { location: redirectTarget() });
      response.end("moved");
    } else if (path === "/redirect-in") {
      response.writeHead(307, { location: "/hook/after-redirect" });
      response.end();
    } else if (path === "/big") {
      response.writeHead(200, { "content-type": "application/octet-stream" });
      const chunk = Buffer.alloc(16 * 1024, 0x61);
      let sent = 0;
      const pump = () => {
        while (sent < BIG_RESPONSE_BYTES && !response.destroyed) {
          sent += chunk.length;
          if (!response.write(chunk)) return void response.once("drain", pump);
        }
        response.end();
      };
      pump();
    } else if (path.startsWith("/exact/")) {
      response.writeHead(200);
      response.end(Buffer.alloc(Number(path.slice("/exact/".length)), 0x62));
    } else if (path === "/hang") {
      // Never answers: the client's time budget must end it.
    } else if (path === "/trickle") {
      response.writeHead(200);
      const timer = setInterval(() => response.write("."), 50);
      pendingTimers.add(timer);
      response.on("close", () => clearInterval(timer));
    } else {
      response.writeHead(404);
      response.end();
    }
  };
  const server = https.createServer({ cert: certificate.cert, key: certificate.key, ...extra }, (request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => handle(request, response, Buffer.concat(chunks).toString("utf8")));
  });
  let accepted = 0;
  const open = new Set<TLSSocket>();
  server.on("secureConnection", (socket: TLSSocket) => {
    accepted += 1;
    open.add(socket);
    socket.on("close", () => open.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    received,
    connectionsAccepted: () => accepted,
    connectionsOpen: () => open.size,
    close: () =>
      new Promise<void>((resolve) => {
        for (const timer of pendingTimers) clearInterval(timer);
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/* ------------------------------------------------------------------------------------------------
 * Shared fixtures
 * ---------------------------------------------------------------------------------------------- */

const SECRET_PATH = "/workflows/3f1c0d/triggers/manual/paths/invoke?sig=TOPSECRET-SIGNATURE";
const BOUND = { timeout: 10_000 };
const CALL_TIMEOUT_MS = 3_000;

let certificate: TestCertificate;
let receiver: Receiver;
let canary4: Canary;
let canary6: Canary | undefined;
/** Canaries on the receiver's own port at other loopback addresses: where a rebound answer would land. */
let reboundCanary4: Canary | undefined;
let reboundCanary6: Canary | undefined;

function allCanaries(): Canary[] {
  return [canary4, canary6, reboundCanary4, reboundCanary6].filter((canary): canary is Canary => canary !== undefined);
}

function totalCanaryConnections(): number {
  return allCanaries().reduce((sum, canary) => sum + canary.connections(), 0);
}

function resolverFrom(table: Record<string, string[]>): HostResolver & { calls: string[] } {
  const calls: string[] = [];
  const resolver = async (hostname: string) => {
    calls.push(hostname);
    const answers = table[hostname];
    if (!answers) throw Object.assign(new Error(`no test answer for ${hostname}`), { code: "ENOTFOUND" });
    return answers;
  };
  return Object.assign(resolver, { calls });
}

async function refusal(call: Promise<unknown>): Promise<EgressError> {
  try {
    await call;
  } catch (error) {
    expect(error).toBeInstanceOf(EgressError);
    return error as EgressError;
  }
  throw new Error("expected the call to be refused");
}

function expectNoSecretIn(error: EgressError): void {
  expect(error.message).not.toContain("TOPSECRET");
  expect(error.message).not.toContain("/workflows");
  expect(error.message).not.toContain("sig=");
}

beforeAll(async () => {
  installLoopbackOnlyGuard();
  certificate = certificateFromOpenssl() ?? certificateFromNodeCrypto();
  const canary = await startCanary("127.0.0.1");
  if (!canary) throw new Error("could not start the IPv4 loopback canary");
  canary4 = canary;
  canary6 = await startCanary("::1"); // absent when the machine has no IPv6 loopback
  receiver = await startReceiver(certificate, () => `http://127.0.0.1:${canary4.port}/stolen`);
  reboundCanary4 = await startCanary("127.0.0.2", receiver.port);
  reboundCanary6 = await startCanary("::1", receiver.port);
});

afterAll(async () => {
  net.Socket.prototype.connect = originalSocketConnect;
  await Promise.all([receiver?.close(), ...allCanaries().map((canary) => canary.close())]);
});

afterEach(() => {
  expect(nonLoopbackAttempts, "a test tried to connect outside loopback").toEqual([]);
});

/* ------------------------------------------------------------------------------------------------
 * Positive path over a real HTTPS receiver
 * ---------------------------------------------------------------------------------------------- */

describe("requests to an allowed HTTPS receiver on loopback", () => {
  const onPremisesPolicy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.0/8"], requireHttps: true });
  const clientFor = (resolver?: HostResolver, limits: { timeoutMs?: number; maxResponseBytes?: number } = {}) =>
    createEgressClient({
      policy: onPremisesPolicy,
      ca: certificate.cert,
      timeoutMs: limits.timeoutMs ?? CALL_TIMEOUT_MS,
      maxResponseBytes: limits.maxResponseBytes ?? 64 * 1024,
      ...(resolver ? { resolver } : {}),
    });

  it("posts a body to an IP literal and reads the answer", BOUND, async () => {
    const response = await clientFor().request({
      url: `https://127.0.0.1:${receiver.port}/hook/literal`,
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: "hello" }),
    });
    expect(response.status).toBe(200);
    expect(response.truncated).toBe(false);
    expect(JSON.parse(response.body.toString("utf8"))).toEqual({ ok: true, length: 16 });
    expect(receiver.received.at(-1)).toMatchObject({ method: "POST", path: "/hook/literal", body: '{"text":"hello"}' });
  });

  it("connects to the resolved address but keeps the name for SNI, the certificate and Host", BOUND, async () => {
    const resolver = resolverFrom({ "receiver.test": ["127.0.0.1"] });
    const response = await clientFor(resolver).request({
      url: `https://receiver.test:${receiver.port}/hook/by-name`,
      headers: { host: "evil.test" },
    });
    expect(response.status).toBe(200);
    expect(resolver.calls).toEqual(["receiver.test"]);
    expect(receiver.received.at(-1)).toMatchObject({
      path: "/hook/by-name",
      host: `receiver.test:${receiver.port}`,
      servername: "receiver.test",
    });
  });

  it("verifies the certificate: without the extra CA the call fails as a TLS error", BOUND, async () => {
    const untrusting = createEgressClient({ policy: onPremisesPolicy, timeoutMs: CALL_TIMEOUT_MS, maxResponseBytes: 1024 });
    const error = await refusal(untrusting.request({ url: `https://127.0.0.1:${receiver.port}${SECRET_PATH}` }));
    expect(error.reason).toBe("tls");
    expectNoSecretIn(error);
  });

  it("verifies the name: a certificate for other names is refused", BOUND, async () => {
    const resolver = resolverFrom({ "other-name.test": ["127.0.0.1"] });
    const error = await refusal(clientFor(resolver).request({ url: `https://other-name.test:${receiver.port}${SECRET_PATH}` }));
    expect(error.reason).toBe("tls");
    expectNoSecretIn(error);
  });

  it("returns a 3xx as the answer and follows neither an outside nor a same-host Location", BOUND, async () => {
    const before = receiver.received.length;
    const outward = await clientFor().request({ url: `https://127.0.0.1:${receiver.port}/redirect-out` });
    expect(outward.status).toBe(302);
    expect(outward.headers.location).toBe(`http://127.0.0.1:${canary4.port}/stolen`);
    const inward = await clientFor().request({ url: `https://127.0.0.1:${receiver.port}/redirect-in` });
    expect(inward.status).toBe(307);
    expect(receiver.received.slice(before).map((request) => request.path)).toEqual(["/redirect-out", "/redirect-in"]);
    expect(totalCanaryConnections()).toBe(0);
  });

  it("cuts an oversized response at the cap and says so", BOUND, async () => {
    const response = await clientFor(undefined, { maxResponseBytes: 1000 }).request({
      url: `https://127.0.0.1:${receiver.port}/big`,
    });
    expect(response.status).toBe(200);
    expect(response.truncated).toBe(true);
    expect(response.body.length).toBe(1000);
  });

  it("keeps a response exactly at the cap whole", BOUND, async () => {
    const response = await clientFor(undefined, { maxResponseBytes: 1000 }).request({
      url: `https://127.0.0.1:${receiver.port}/exact/1000`,
    });
    expect(response.truncated).toBe(false);
    expect(response.body.length).toBe(1000);
  });

  it("gives up on a server that never answers", BOUND, async () => {
    const started = Date.now();
    const error = await refusal(clientFor(undefined, { timeoutMs: 300 }).request({ url: `https://127.0.0.1:${receiver.port}/hang` }));
    expect(error.reason).toBe("timeout");
    // A hang detector (over 20 times the 300 ms budget): a client that never gave up would hit it.
    expect(Date.now() - started).toBeLessThan(8_000);
  });

  it("gives up on a body that trickles in forever", BOUND, async () => {
    const started = Date.now();
    const error = await refusal(
      clientFor(undefined, { timeoutMs: 400, maxResponseBytes: 1024 * 1024 }).request({
        url: `https://127.0.0.1:${receiver.port}/trickle`,
      }),
    );
    expect(error.reason).toBe("timeout");
    // A hang detector (20 times the 400 ms budget): a timeout that restarts with each trickled
    // byte would never fire.
    expect(Date.now() - started).toBeLessThan(8_000);
  });

  it("counts a stalled resolver against the time budget", BOUND, async () => {
    const stalled: HostResolver = () => new Promise<string[]>(() => undefined);
    const error = await refusal(clientFor(stalled, { timeoutMs: 200 }).request({ url: `https://receiver.test:${receiver.port}${SECRET_PATH}` }));
    expect(error.reason).toBe("timeout");
    expectNoSecretIn(error);
  });

  it("refuses a header value that would split the request, before connecting", BOUND, async () => {
    const before = receiver.received.length;
    const error = await refusal(clientFor().request({ url: `https://127.0.0.1:${receiver.port}${SECRET_PATH}`, headers: { "x-note": "a\r\nx-injected: 1" } }));
    expect(error.reason).toBe("invalid_request");
    expectNoSecretIn(error);
    expect(receiver.received.length).toBe(before);
  });

  it("presents a client certificate for mutual TLS", BOUND, async () => {
    const mutual = await startReceiver(certificate, () => "/", {
      requestCert: true,
      rejectUnauthorized: false,
      ca: certificate.cert,
    });
    try {
      const url = `https://127.0.0.1:${mutual.port}/hook/mtls`;
      await clientFor().request({ url, clientCert: certificate.cert, clientKey: certificate.key });
      await clientFor().request({ url });
      expect(mutual.received.map((request) => request.clientCertificateAuthorized)).toEqual([true, false]);
    } finally {
      await mutual.close();
    }
  });

  it("vets a URL without connecting, for when it is saved", BOUND, async () => {
    const before = receiver.received.length;
    const target = await clientFor(resolverFrom({ "receiver.test": ["127.0.0.1", "127.0.0.3"] })).vet(`https://receiver.test:${receiver.port}/hook`);
    expect(target).toMatchObject({ hostname: "receiver.test", address: "127.0.0.1", addresses: ["127.0.0.1", "127.0.0.3"] });
    expect(receiver.received.length).toBe(before);
  });

  describe("with kept-alive connections", () => {
    const keptAliveClient = (resolver: HostResolver, policy = onPremisesPolicy) =>
      createEgressClient({ policy, ca: certificate.cert, resolver, timeoutMs: CALL_TIMEOUT_MS, maxResponseBytes: 64 * 1024, keepAliveMs: 2_000 });
    const waitFor = async (condition: () => boolean) => {
      for (let i = 0; i < 100 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
      return condition();
    };

    it("sends consecutive posts to one pinned address over one connection, vetting the name each time", BOUND, async () => {
      const own = await startReceiver(certificate, () => "/");
      try {
        const resolver = resolverFrom({ "receiver.test": ["127.0.0.1"] });
        const client = keptAliveClient(resolver);
        const url = `https://receiver.test:${own.port}/hook/kept`;
        for (let i = 0; i < 5; i++) expect((await client.request({ url, method: "POST", body: `{"n":${i}}` })).status).toBe(200);
        expect(own.connectionsAccepted()).toBe(1);
        expect(new Set(own.received.map((request) => request.remotePort)).size).toBe(1);
        expect(own.received.map((request) => request.servername)).toEqual(Array(5).fill("receiver.test"));
        // The pin is checked on every send: the resolver was asked each time.
        expect(resolver.calls).toEqual(Array(5).fill("receiver.test"));
        client.close();
        expect(await waitFor(() => own.connectionsOpen() === 0)).toBe(true);
      } finally {
        await own.close();
      }
    });

    it("never reuses a kept connection once the name resolves elsewhere: the old pin's connections are closed", BOUND, async () => {
      const own = await startReceiver(certificate, () => "/");
      // Where the re-resolved answer lands: an allowed address, reached only by a new connection.
      const elsewhere = await startCanary("127.0.0.3", own.port);
      if (!elsewhere) throw new Error("could not start a canary on 127.0.0.3");
      try {
        let answers = 0;
        const moving: HostResolver = async () => (++answers === 1 ? ["127.0.0.1"] : ["127.0.0.3"]);
        const client = keptAliveClient(moving);
        const url = `https://rebind.test:${own.port}/hook/moving`;
        expect((await client.request({ url })).status).toBe(200);
        expect(own.connectionsOpen()).toBe(1);
        // The canary is no TLS server: the call fails, but it went to the new pin.
        await refusal(client.request({ url }));
        expect(elsewhere.connections()).toBe(1);
        expect(own.received.length).toBe(1);
        expect(await waitFor(() => own.connectionsOpen() === 0)).toBe(true);
        client.close();
      } finally {
        await Promise.all([own.close(), elsewhere.close()]);
      }
    });

    it("closes a kept connection whose name now resolves to a denied address, and never sends on it", BOUND, async () => {
      const own = await startReceiver(certificate, () => "/");
      try {
        let answers = 0;
        // Third answer: the first address again, which must come over a new connection.
        const rebinding: HostResolver = async () => (++answers === 2 ? ["::1"] : ["127.0.0.1"]);
        const client = keptAliveClient(rebinding);
        const url = `https://rebind-private.test:${own.port}/hook/kept-then-denied`;
        expect((await client.request({ url })).status).toBe(200);
        const error = await refusal(client.request({ url: `https://rebind-private.test:${own.port}${SECRET_PATH}` }));
        expect(error.reason).toBe("forbidden_address");
        expectNoSecretIn(error);
        expect(own.received.length).toBe(1);
        expect(await waitFor(() => own.connectionsOpen() === 0)).toBe(true);
        expect((await client.request({ url })).status).toBe(200);
        expect(own.connectionsAccepted()).toBe(2);
        expect(totalCanaryConnections()).toBe(0);
        client.close();
      } finally {
        await own.close();
      }
    });

    it("still refuses every denied range with keep-alive on", BOUND, async () => {
      const strict = createAddressPolicy({ allowPrivateCidrs: [], requireHttps: true });
      const client = keptAliveClient(resolverFrom({ "internal.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"] }), strict);
      for (const url of [
        `https://127.0.0.1:${receiver.port}/hook`,
        `https://internal.test:${receiver.port}/hook`,
        "https://metadata.test/latest/meta-data/",
        `https://[::1]:${receiver.port}/hook`,
      ]) {
        expect((await refusal(client.request({ url }))).reason).toBe("forbidden_address");
      }
      expect(totalCanaryConnections()).toBe(0);
      client.close();
    });

    it("closes an idle kept connection after the idle time", BOUND, async () => {
      const own = await startReceiver(certificate, () => "/");
      try {
        const client = createEgressClient({
          policy: onPremisesPolicy,
          ca: certificate.cert,
          resolver: resolverFrom({ "receiver.test": ["127.0.0.1"] }),
          timeoutMs: CALL_TIMEOUT_MS,
          maxResponseBytes: 1024,
          keepAliveMs: 100,
        });
        expect((await client.request({ url: `https://receiver.test:${own.port}/hook/idle` })).status).toBe(200);
        expect(await waitFor(() => own.connectionsOpen() === 0)).toBe(true);
        expect(client.pooledConnections()).toBe(0);
      } finally {
        await own.close();
      }
    });

    it("opens a connection per call for a call with its own TLS material", BOUND, async () => {
      const own = await startReceiver(certificate, () => "/", { requestCert: true, rejectUnauthorized: false, ca: certificate.cert });
      try {
        const client = keptAliveClient(resolverFrom({}));
        const url = `https://127.0.0.1:${own.port}/hook/mtls-kept`;
        await client.request({ url, clientCert: certificate.cert, clientKey: certificate.key });
        await client.request({ url });
        expect(own.received.map((request) => request.clientCertificateAuthorized)).toEqual([true, false]);
        expect(own.connectionsAccepted()).toBe(2);
        client.close();
      } finally {
        await own.close();
      }
    });
  });

  it("works with a certificate made by the built-in generator as well", BOUND, async () => {
    const generated = certificateFromNodeCrypto();
    expect(new X509Certificate(generated.cert).subjectAltName).toContain("DNS:receiver.test");
    const other = await startReceiver(generated, () => "/");
    try {
      const client = createEgressClient({
        policy: onPremisesPolicy,
        ca: generated.cert,
        timeoutMs: CALL_TIMEOUT_MS,
        maxResponseBytes: 1024,
        resolver: resolverFrom({ "receiver.test": ["127.0.0.1"] }),
      });
      const response = await client.request({ url: `https://receiver.test:${other.port}/hook/generated` });
      expect(response.status).toBe(200);
    } finally {
      await other.close();
    }
  });

  it("trusts its own extra CA only: a receiver certified by another CA is refused, on a kept connection or not", BOUND, async () => {
    // The client parses its trust once and shares it between connections: it must still check each.
    const otherCa = certificateFromNodeCrypto().cert;
    for (const keepAliveMs of [0, 2_000]) {
      const client = createEgressClient({ policy: onPremisesPolicy, ca: otherCa, timeoutMs: CALL_TIMEOUT_MS, maxResponseBytes: 1024, keepAliveMs });
      const error = await refusal(client.request({ url: `https://127.0.0.1:${receiver.port}${SECRET_PATH}` }));
      expect(error.reason).toBe("tls");
      client.close();
    }
  });
});

/* ------------------------------------------------------------------------------------------------
 * SSRF suite
 * ---------------------------------------------------------------------------------------------- */

describe("SSRF suite: loopback canaries receive no connection", () => {
  const chatWebhookPolicy = createAddressPolicy({ allowPrivateCidrs: [], requireHttps: true });
  const namedTargets = {
    "internal.test": ["127.0.0.1"],
    "private-lan.test": ["192.168.1.10"],
    "public-then-private.test": ["93.184.216.34", "127.0.0.1"],
    "private-then-public.test": ["127.0.0.1", "93.184.216.34"],
    "public-and-private-v6.test": ["2606:4700:4700::1111", "::1"],
    "mapped-answer.test": ["::ffff:127.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "public.test": ["93.184.216.34"],
  };
  const chatClient = () =>
    createEgressClient({
      policy: chatWebhookPolicy,
      resolver: resolverFrom(namedTargets),
      timeoutMs: CALL_TIMEOUT_MS,
      maxResponseBytes: 1024,
    });

  const port4 = () => canary4.port;
  const port6 = () => canary6?.port ?? canary4.port;
  const cases: Array<[string, () => string, EgressErrorReason]> = [
    ["dotted loopback", () => `https://127.0.0.1:${port4()}`, "forbidden_address"],
    ["decimal IPv4", () => `https://2130706433:${port4()}`, "forbidden_address"],
    ["octal IPv4", () => `https://0177.0.0.1:${port4()}`, "forbidden_address"],
    ["whole octal IPv4", () => `https://017700000001:${port4()}`, "forbidden_address"],
    ["hex IPv4", () => `https://0x7f.1:${port4()}`, "forbidden_address"],
    ["whole hex IPv4", () => `https://0x7f000001:${port4()}`, "forbidden_address"],
    ["short form 127.1", () => `https://127.1:${port4()}`, "forbidden_address"],
    ["percent-encoded host", () => `https://%31%32%37.0.0.1:${port4()}`, "forbidden_address"],
    ["trailing dot", () => `https://127.0.0.1.:${port4()}`, "forbidden_address"],
    ["IPv4-mapped IPv6 hex", () => `https://[::ffff:7f00:1]:${port4()}`, "forbidden_address"],
    ["IPv4-mapped IPv6 dotted", () => `https://[::ffff:127.0.0.1]:${port4()}`, "forbidden_address"],
    ["IPv4-translated IPv6", () => `https://[::ffff:0:7f00:1]:${port4()}`, "forbidden_address"],
    ["IPv4-compatible IPv6", () => `https://[::127.0.0.1]:${port4()}`, "forbidden_address"],
    ["unspecified IPv6 [::]", () => `https://[::]:${port6()}`, "forbidden_address"],
    ["unspecified 0.0.0.0", () => `https://0.0.0.0:${port4()}`, "forbidden_address"],
    ["unspecified spelled 0", () => `https://0:${port4()}`, "forbidden_address"],
    ["IPv6 loopback", () => `https://[::1]:${port6()}`, "forbidden_address"],
    ["IPv6 loopback long form", () => `https://[0:0:0:0:0:0:0:1]:${port6()}`, "forbidden_address"],
    ["IPv6 link-local", () => `https://[fe80::1]:${port6()}`, "forbidden_address"],
    ["IPv6 unique local", () => `https://[fd00::1]:${port6()}`, "forbidden_address"],
    ["cloud metadata", () => "https://169.254.169.254/latest/meta-data/iam/security-credentials/", "forbidden_address"],
    ["cloud metadata as mapped IPv6", () => "https://[::ffff:a9fe:a9fe]/latest/meta-data/", "forbidden_address"],
    ["cloud metadata as decimal", () => "https://2852039166/latest/meta-data/", "forbidden_address"],
    ["cloud metadata over IPv6", () => "https://[fd00:ec2::254]/latest/meta-data/", "forbidden_address"],
    ["NAT64 of loopback", () => `https://[64:ff9b::7f00:1]:${port4()}`, "forbidden_address"],
    ["NAT64 of metadata", () => "https://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "forbidden_address"],
    ["6to4 of loopback", () => `https://[2002:7f00:1::1]:${port4()}`, "forbidden_address"],
    ["Teredo", () => `https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]:${port4()}`, "forbidden_address"],
    ["CGNAT", () => "https://100.64.0.1/", "forbidden_address"],
    ["RFC 1918", () => "https://10.0.0.1/", "forbidden_address"],
    ["name resolving to loopback", () => `https://internal.test:${port4()}`, "forbidden_address"],
    ["name resolving to a private LAN", () => "https://private-lan.test/", "forbidden_address"],
    ["name with a public, then a private address", () => `https://public-then-private.test:${port4()}`, "forbidden_address"],
    ["name with a private, then a public address", () => `https://private-then-public.test:${port4()}`, "forbidden_address"],
    ["name with public and private IPv6 addresses", () => `https://public-and-private-v6.test:${port6()}`, "forbidden_address"],
    ["name answering with a mapped address", () => `https://mapped-answer.test:${port4()}`, "forbidden_address"],
    ["name resolving to the metadata address", () => "https://metadata.test/latest/meta-data/", "forbidden_address"],
    ["user and password in the URL", () => `https://alice:s3cr3t@public.test:${port4()}`, "forbidden_userinfo"],
    ["user name in the URL", () => `https://alice@127.0.0.1:${port4()}`, "forbidden_userinfo"],
    ["plain http", () => `http://public.test:${port4()}`, "forbidden_scheme"],
    ["plain http to loopback", () => `http://127.0.0.1:${port4()}`, "forbidden_scheme"],
    ["another scheme", () => `ftp://127.0.0.1:${port4()}`, "forbidden_scheme"],
    ["unresolvable name", () => "https://nowhere.test/", "resolution_failed"],
  ];

  it.each(cases)("refuses %s", BOUND, async (_trick, target, reason) => {
    const error = await refusal(chatClient().request({ url: `${target()}${SECRET_PATH}`, method: "POST", body: "{}" }));
    expect(error.reason).toBe(reason);
    expectNoSecretIn(error);
    expect(totalCanaryConnections()).toBe(0);
  });

  it("refuses a name resolving to loopback through the system resolver", BOUND, async () => {
    const systemClient = createEgressClient({ policy: chatWebhookPolicy, timeoutMs: CALL_TIMEOUT_MS, maxResponseBytes: 1024 });
    const error = await refusal(systemClient.request({ url: `https://localhost:${port4()}${SECRET_PATH}` }));
    expect(error.reason).toBe("forbidden_address");
    expectNoSecretIn(error);
  });

  it("refuses at save time too, with the same checks", BOUND, async () => {
    const error = await refusal(chatClient().vet(`https://public-then-private.test${SECRET_PATH}`));
    expect(error.reason).toBe("forbidden_address");
    // The kind of address, never the address a name resolves to: errors must not map internal DNS.
    expect(error.message).toContain("a loopback address");
    expect(error.message).not.toContain("127.0.0.1");
    expectNoSecretIn(error);
  });

  describe("with loopback allowed for an on-premises receiver", () => {
    const onPremisesPolicy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.0/8"], requireHttps: true });
    const onPremisesClient = (resolver: HostResolver = resolverFrom({})) =>
      createEgressClient({ policy: onPremisesPolicy, ca: certificate.cert, resolver, timeoutMs: CALL_TIMEOUT_MS, maxResponseBytes: 1024 });

    it.each<[string, () => string]>([
      ["0.0.0.0, which reaches loopback", () => `https://0.0.0.0:${receiver.port}`],
      ["[::], which reaches loopback", () => `https://[::]:${receiver.port}`],
      ["IPv6 loopback, not in the allowed range", () => `https://[::1]:${receiver.port}`],
      ["the metadata address", () => "https://169.254.169.254"],
    ])("still refuses %s", BOUND, async (_trick, target) => {
      const error = await refusal(onPremisesClient().request({ url: `${target()}${SECRET_PATH}` }));
      expect(error.reason).toBe("forbidden_address");
      expectNoSecretIn(error);
      expect(totalCanaryConnections()).toBe(0);
    });

    it("does not follow a redirect from the allowed receiver to a private address", BOUND, async () => {
      const before = receiver.received.length;
      const response = await onPremisesClient().request({ url: `https://127.0.0.1:${receiver.port}/redirect-out` });
      expect(response.status).toBe(302);
      expect(receiver.received.length).toBe(before + 1);
      expect(canary4.connections()).toBe(0);
    });

    it("pins the first vetted answer: a rebinding resolver never gets asked twice", BOUND, async () => {
      // A second lookup would land on a canary listening on the receiver's port at 127.0.0.2,
      // an address the policy allows: only pinning, not the policy, keeps the call on 127.0.0.1.
      let answers = 0;
      const rebinding: HostResolver = async () => (++answers === 1 ? ["127.0.0.1"] : ["127.0.0.2"]);
      const response = await onPremisesClient(rebinding).request({ url: `https://rebind.test:${receiver.port}/hook/rebind` });
      expect(response.status).toBe(200);
      expect(answers).toBe(1);
      expect(receiver.received.at(-1)).toMatchObject({ path: "/hook/rebind", servername: "rebind.test" });
      expect(totalCanaryConnections()).toBe(0);
    });

    it("checks again on every send: a later private answer is refused, never connected to", BOUND, async () => {
      let answers = 0;
      const rebinding: HostResolver = async () => (++answers === 1 ? ["127.0.0.1"] : ["::1"]);
      const client = onPremisesClient(rebinding);
      const url = `https://rebind-private.test:${receiver.port}/hook/rebind-private`;
      expect((await client.request({ url })).status).toBe(200);
      const error = await refusal(client.request({ url: `https://rebind-private.test:${receiver.port}${SECRET_PATH}` }));
      expect(error.reason).toBe("forbidden_address");
      expect(error.message).toContain("a loopback address");
      expect(error.message).not.toContain("::1");
      expectNoSecretIn(error);
      expect(answers).toBe(2);
      expect(totalCanaryConnections()).toBe(0);
    });
  });

  it("has canaries that do count connections", BOUND, async () => {
    // Runs last: proves a zero above means "not reached", not "not listening".
    const canary = await startCanary("127.0.0.1");
    if (!canary) throw new Error("could not start a canary");
    try {
      await new Promise<void>((resolve, reject) => {
        const socket = net.connect(canary.port, "127.0.0.1", () => socket.end());
        socket.on("close", () => resolve());
        socket.on("error", reject);
      });
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(canary.connections()).toBe(1);
    } finally {
      await canary.close();
    }
  });
});

import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer, type Server } from "node:https";
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Test-only: a real HTTPS chat-webhook receiver on loopback, with a certificate from a CA made for
 * the test run (trusted by the service through EGRESS_CA_FILE), that records every post.
 */

export interface ReceivedPost {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  bytes: number;
}

export interface TestCertificates {
  dir: string;
  caFile: string;
  key: Buffer;
  cert: Buffer;
  remove(): void;
}

/** A CA and a server certificate for 127.0.0.1 and localhost, made with openssl. */
export function makeTestCertificates(): TestCertificates {
  const dir = mkdtempSync(join(tmpdir(), "chat-webhook-tls-"));
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe", timeout: 20_000 });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run([
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=chat webhook test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  run(["req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]);
  writeFileSync(
    join(dir, "server.ext"),
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
  );
  run([
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.pem",
    "-days",
    "2",
    "-extfile",
    "server.ext",
  ]);
  return {
    dir,
    caFile: join(dir, "ca.pem"),
    key: readFileSync(join(dir, "server.key")),
    cert: readFileSync(join(dir, "server.pem")),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface ChatWebhookReceiver {
  port: number;
  /** Every post, in arrival order. */
  posts: ReceivedPost[];
  /** A URL on this receiver whose path decides the answer: ok (202), gone (404), legacy-throttled, slow, redirect. */
  url(behaviour: "ok" | "gone" | "legacy-throttled" | "slow" | "redirect", secret: string): string;
  close(): Promise<void>;
}

/**
 * Answers like a Workflows webhook: 202 for /hooks/ok/..., 404 for /hooks/gone/..., a legacy
 * connector's 200 with a throttling notice for /hooks/legacy-throttled/..., no answer at all for
 * /hooks/slow/..., and a redirect to `redirectTo` for /hooks/redirect/....
 */
export async function startChatWebhookReceiver(certs: TestCertificates, redirectTo = "https://127.0.0.1:9/"): Promise<ChatWebhookReceiver> {
  const posts: ReceivedPost[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createHttpsServer({ key: certs.key, cert: certs.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      let body: unknown = raw.toString("utf8");
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        // Kept as text: a test looks at it.
      }
      const path = req.url ?? "/";
      posts.push({ path, headers: req.headers, body, bytes: raw.length });
      const behaviour = path.split("/")[2];
      if (behaviour === "ok") {
        res.writeHead(202).end();
      } else if (behaviour === "gone") {
        res.writeHead(404, { "content-type": "text/plain" }).end("workflow not found");
      } else if (behaviour === "legacy-throttled") {
        res.writeHead(200, { "content-type": "text/plain" }).end("Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0,server=msgapi-canary");
      } else if (behaviour === "redirect") {
        res.writeHead(302, { location: redirectTo }).end();
      }
      // slow: never answers; the socket is destroyed on close.
    });
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    posts,
    url: (behaviour, secret) => `https://127.0.0.1:${port}/hooks/${behaviour}/workflows/${secret}/triggers/manual/paths/invoke?api-version=1&sig=${secret}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A TCP listener on loopback that only counts connections: nothing may ever reach it. */
export async function startCanary(): Promise<{ port: number; connections: () => number; close(): Promise<void> }> {
  let count = 0;
  const server: TcpServer = createTcpServer((socket) => {
    count++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    connections: () => count,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A loopback port nothing listens on. */
export async function closedPort(): Promise<number> {
  const server = createTcpServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

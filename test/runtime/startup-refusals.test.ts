import { createServer, type Server } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { ADMIN_DATABASE_URL, freshDatabase } from "../support/app.js";
import { startServiceProcess, tempDataDir } from "../support/service-process.js";

/**
 * Configuration mistakes stop the service at start with one line that says what is wrong and what
 * to do, and never echo a credential back into the logs.
 */

const dirs: Array<{ cleanup(): void }> = [];
afterAll(() => {
  for (const d of dirs) d.cleanup();
});
const dataDir = () => {
  const d = tempDataDir("wr-refusals-");
  dirs.push(d);
  return d.dir;
};

/** Runs the one-process service with `env` until it exits; a hang bound, not a budget. */
async function refusal(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const service = startServiceProcess({ PORT: "0", HOST: "127.0.0.1", NATS_URL: "", DATA_DIR: dataDir(), LOG_LEVEL: "info", ...env });
  const timer = setTimeout(() => service.child.kill("SIGKILL"), 90_000);
  const { code } = await service.exited;
  clearTimeout(timer);
  return { code, output: service.output() };
}

/** Each line the process wrote, parsed: every one is a JSON object (a log line). */
function jsonLines(output: string): Array<Record<string, unknown>> {
  return output
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new Error(`not a JSON log line: ${line}`);
      }
    });
}

describe("a malformed DATABASE_URL", () => {
  for (const [what, password] of [
    ["an unencoded /", "s3cr/etPw"],
    ["an unencoded #", "s3cr#etPw"],
    ["an unencoded ?", "s3cr?etPw"],
  ] as const) {
    it(`with ${what} in the password is refused, naming the part and never printing the password`, async () => {
      const { code, output } = await refusal({ DATABASE_URL: `postgres://warroom:${password}@127.0.0.1:5432/warroom` });
      expect(code).toBe(1);
      expect(output).not.toContain(password);
      for (const piece of password.split(/[/#?]/)) expect(output).not.toContain(piece);
      expect(output).toMatch(/DATABASE_URL/);
      expect(output).toMatch(/password/);
      expect(output).toMatch(/percent-encode/);
      expect(output).not.toMatch(/Invalid URL/);
      const lines = jsonLines(output);
      expect(lines.at(-1)).toMatchObject({ level: 60, name: "warroom" });
    });
  }

  it("that is no URL at all is refused without printing it", async () => {
    const { code, output } = await refusal({ DATABASE_URL: "host=db user=warroom password=hunter2xyz" });
    expect(code).toBe(1);
    expect(output).not.toContain("hunter2xyz");
    expect(output).toMatch(/DATABASE_URL/);
    expect(output).toMatch(/postgres:\/\/user:password@host:5432\/database/);
  });
});

describe("configuration mistakes", () => {
  it("an embedded database nobody asked for is refused when NATS_URL is set, naming a mistyped DATABASE_URL, in one JSON line", async () => {
    const { code, output } = await refusal({ DATABASE_URL: "", DATABSE_URL: ADMIN_DATABASE_URL, NATS_URL: "nats://127.0.0.1:4222" });
    expect(code).toBe(1);
    const lines = jsonLines(output);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 60, name: "warroom" });
    expect(lines[0]!.msg).toMatch(/NATS_URL is set but DATABASE_URL is not/);
    expect(lines[0]!.msg).toMatch(/DATABASE_EMBEDDED=true/);
    expect(lines[0]!.msg).toMatch(/unknown variable DATABSE_URL: did you mean DATABASE_URL\?/);
    expect(output).not.toMatch(/embedded Postgres (started|created)/i);
  });

  it("so is one when only a misspelled DATABASE_URL is set, in one process: never an embedded database on a container's disk", async () => {
    const { code, output } = await refusal({ DATABASE_URL: "", DATABSE_URL: ADMIN_DATABASE_URL });
    expect(code).toBe(1);
    expect(jsonLines(output)[0]!.msg).toMatch(/DATABSE_URL is set but DATABASE_URL is not \(a misspelling\?\)/);
    expect(output).not.toContain(ADMIN_DATABASE_URL);
  });

  it("a variable the service does not read is warned of at start, with the known name it is close to", async () => {
    const service = startServiceProcess({ PORT: "0", HOST: "127.0.0.1", NATS_URL: "", LOG_LEVEL: "info", SECRETS_KEY: "k1:whatever", NATS_SERVERS: "x" });
    try {
      await service.serving;
      const warnings = jsonLines(service.output()).filter((line) => line.level === 40);
      expect(warnings.map((line) => line.msg)).toEqual(
        expect.arrayContaining([
          "unknown variable NATS_SERVERS: the service reads no such variable (docs/reference/configuration.md lists those it reads)",
          "unknown variable SECRETS_KEY: did you mean SECRETS_KEYS?",
        ]),
      );
      expect(service.output()).not.toContain("k1:whatever");
    } finally {
      service.child.kill("SIGTERM");
      await service.exited;
    }
  });
});

/**
 * A NATS server as far as a client's handshake goes (INFO, then PONG for each PING), announcing
 * `version`: nats-server cannot be made to announce an old version, and an old release would be a
 * second binary to install for one check.
 */
async function natsAnnouncing(version: string): Promise<{ url: string; connections: () => number; close(): Promise<void> }> {
  let connections = 0;
  const server: Server = createServer((socket) => {
    connections++;
    const info = {
      server_id: "NOLDSERVER",
      server_name: "old",
      version,
      proto: 1,
      go: "go1.19",
      host: "127.0.0.1",
      port: 0,
      headers: true,
      max_payload: 1048576,
    };
    socket.write(`INFO ${JSON.stringify(info)}\r\n`);
    socket.on("data", (chunk) => {
      for (const line of chunk.toString().split("\r\n")) if (line === "PING") socket.write("PONG\r\n");
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `nats://127.0.0.1:${port}`,
    connections: () => connections,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("a NATS server older than the JetStream API the event bus needs", () => {
  it("is refused at start in one JSON line naming the version it announced and the one to upgrade to", async () => {
    const nats = await natsAnnouncing("2.9.3");
    const db = await freshDatabase();
    try {
      const { code, output } = await refusal({ DATABASE_URL: db.url, NATS_URL: nats.url, NATS_ALLOW_UNAUTHENTICATED: "true" });
      expect(nats.connections(), "the service connected to the server").toBeGreaterThan(0);
      expect(code).toBe(1);
      const fatal = jsonLines(output).filter((line) => line.level === 60);
      expect(fatal).toHaveLength(1);
      expect(fatal[0]!.msg).toMatch(/the NATS server is version 2\.9\.3, older than 2\.9\.4/);
      expect(fatal[0]!.msg).toMatch(/upgrade NATS to 2\.10\.0 or later/);
      expect(output).not.toMatch(/"msg":"serving"/);
    } finally {
      await nats.close();
      await db.drop();
    }
  });
});

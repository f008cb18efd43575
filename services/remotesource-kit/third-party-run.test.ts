import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import { checkCommand } from "./check.js";

/**
 * The kit as a third party uses it: the README's minimal source and the example's `main.ts`,
 * copied to a `.ts` file in a package without `"type": "module"` and run with `tsx` as the README
 * says (there tsx runs the file as CommonJS, where a top-level await is a syntax error); and the
 * `check-source` command against a source that refuses the connection.
 */

const KIT = import.meta.dirname;
const TSX = join(KIT, "../../node_modules/.bin/tsx");
const dirs: string[] = [];
const children: ChildProcess[] = [];

/**
 * Signals `tsx` and the node process it starts, as one process group: tsx relays a signal to its
 * child only once its own event loop gets to it, and a SIGKILL of tsx alone before then, on a
 * loaded machine, left the source serving for the rest of the run.
 */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // The group is gone already.
  }
}

afterAll(async () => {
  // Each was sent SIGTERM once ready: a few seconds to stop, then whatever of its group is left goes.
  await Promise.all(
    children.map(async (child) => {
      if (child.exitCode === null && child.signalCode === null) {
        await Promise.race([new Promise((resolve) => child.once("exit", resolve)), sleep(10_000)]);
      }
      signalGroup(child, "SIGKILL");
    }),
  );
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A package of the third party's own: no "type", so its `.ts` files are CommonJS to tsx. */
function thirdPartyPackage(file: string, code: string): string {
  const dir = mkdtempSync(join(tmpdir(), "third-party-source-"));
  dirs.push(dir);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "my-source", private: true }));
  writeFileSync(join(dir, file), code);
  return dir;
}

/** Runs `tsx file` in `dir` until it prints a line matching `ready`; answers that line. */
function runUntil(dir: string, file: string, env: NodeJS.ProcessEnv, ready: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(TSX, [file], { cwd: dir, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    children.push(child);
    let output = "";
    const onData = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      const line = output.split("\n").find((l) => ready.test(l));
      if (line) {
        signalGroup(child, "SIGTERM");
        resolve(line);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => reject(new Error(`exited ${code} before it was ready:\n${output}`)));
  });
}

/** The first `ts` block of the kit's README. */
function readmeMinimalSource(): string {
  const readme = readFileSync(join(KIT, "README.md"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme);
  if (!block) throw new Error("the README has no ts block");
  return block[1]!;
}

describe("the kit run as a third party runs it", () => {
  it("the README's minimal source, in a package without type: module, serves", async () => {
    const code = readmeMinimalSource()
      .replace('"./services/remotesource-kit/index.js"', JSON.stringify(join(KIT, "index.js")))
      // Any free port, on loopback only.
      .replace('{ port: 9400, host: "0.0.0.0" }', '{ port: 0, host: "127.0.0.1" }');
    expect(code).toContain('{ port: 0, host: "127.0.0.1" }');
    const dir = thirdPartyPackage("my-source.ts", code);
    const line = await runUntil(dir, "my-source.ts", { SOURCE_TOKEN: "third-party-token" }, /serving on http:\/\/127\.0\.0\.1:\d+|ERROR/);
    expect(line).toMatch(/^serving on http:\/\/127\.0\.0\.1:\d+/);
  });

  it("the example's main.ts, copied the same way, serves", async () => {
    const code = readFileSync(join(KIT, "examples/prometheus-files/main.ts"), "utf8")
      .replace('"../../index.js"', JSON.stringify(join(KIT, "index.js")))
      .replace('"./source.js"', JSON.stringify(join(KIT, "examples/prometheus-files/source.js")));
    const dir = thirdPartyPackage("main.ts", code);
    const env = { SOURCE_TOKENS: "third-party-token", PROMETHEUS_URL: "http://127.0.0.1:9", LOG_DIR: dir, PORT: "0", HOST: "127.0.0.1" };
    const line = await runUntil(dir, "main.ts", env, /serving HTTP-JSON and gRPC on port \d+|ERROR/);
    expect(line).toMatch(/^prometheus-files source serving HTTP-JSON and gRPC on port \d+$/);
  });
});

describe("check-source against a source it cannot reach", () => {
  it("passes nothing: every check fails, and 'credentials accepted' says the connection was refused", async () => {
    // A port that was just free: nothing listens there.
    const port = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const { exitCode, output } = await checkCommand([`http://127.0.0.1:${port}`], { SOURCE_TOKEN: "t" });
    expect(exitCode).toBe(1);
    expect(output).not.toMatch(/^PASS/m);
    expect(output).toMatch(
      /^FAIL {2}credentials accepted: not checked: no call with the connection's credential reached the source \(unreachable: .*ECONNREFUSED/m,
    );
  });
});

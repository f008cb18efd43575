import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newSigningSecret, signDelivery } from "../../services/subscriptions/signing.js";
import { freePort } from "../support/nats-server.js";

const ROOT = join(import.meta.dirname, "../..");
const PAGE = readFileSync(join(ROOT, "docs/how-to/subscriptions.md"), "utf8");

/** The code block that holds the line with `marker`, its indentation removed. */
function blockWith(marker: string): string {
  const at = PAGE.indexOf(marker);
  expect(at, marker).toBeGreaterThan(-1);
  const open = PAGE.lastIndexOf("```", at);
  const bodyStart = PAGE.indexOf("\n", open) + 1;
  const end = PAGE.indexOf("```", bodyStart);
  const lines = PAGE.slice(bodyStart, end).replace(/\s+$/, "").split("\n");
  const indent = /^\s*/.exec(lines[0]!)![0].length;
  return `${lines.map((l) => l.slice(indent)).join("\n")}\n`;
}

const secret = newSigningSecret();
const body = JSON.stringify({ type: "incident.opened", timestamp: new Date().toISOString(), data: { incidentId: "inc-1", title: "Disk full" } });

/**
 * The subscriptions guide's receiver and shell verifier, run as written against posts signed by the service's
 * own signing code: a real Standard Webhooks verifier on each side.
 */
describe("the subscriptions guide's receiver", () => {
  let dir: string;
  let child: ChildProcess;
  let port: number;
  let output = "";

  beforeAll(async () => {
    // Inside node_modules, so the receiver's `import "standardwebhooks"` resolves as after npm install.
    dir = mkdtempSync(join(ROOT, "node_modules", ".readme-receiver-"));
    const code = blockWith("// receiver.mjs");
    writeFileSync(join(dir, "receiver.mjs"), code);
    port = await freePort();
    child = spawn(process.execPath, [join(dir, "receiver.mjs")], {
      env: { ...process.env, WEBHOOK_SECRET: secret, PORT: String(port) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    for (;;) {
      try {
        await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: "" });
        break;
      } catch {
        if (Date.now() > deadline) throw new Error(`the receiver did not start: ${output}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  });

  afterAll(() => {
    child?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const post = (headers: Record<string, string>, payload = body) =>
    fetch(`http://127.0.0.1:${port}/`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: payload });

  it("takes a signed post once, drops its retry, and refuses a forged one", async () => {
    const headers = signDelivery([secret], "msg_readme_1", new Date(), body);
    expect((await post({ ...headers })).status).toBe(204);
    expect((await post({ ...signDelivery([secret], "msg_readme_1", new Date(), body) })).status).toBe(204);
    expect((await post({ ...signDelivery([newSigningSecret()], "msg_readme_2", new Date(), body) })).status).toBe(401);
    expect((await post({ ...headers }, body.replace("Disk", "Fake"))).status).toBe(401);
    // Verified during a rotation: signed with a new secret and the one the receiver holds.
    expect((await post({ ...signDelivery([newSigningSecret(), secret], "msg_readme_3", new Date(), body) })).status).toBe(204);
    await new Promise((r) => setTimeout(r, 100));
    expect(output.match(/incident\.opened inc-1 Disk full/g)).toHaveLength(2);
  });

  it("has a shell verifier that accepts a signed body and refuses a tampered one", async () => {
    const script = blockWith("# WEBHOOK_SECRET=whsec_");
    const headers = signDelivery([secret], "msg_sh_1", new Date(), body);
    const run = (b: string) =>
      new Promise<{ code: number; stdout: string }>((resolve) =>
        execFile(
          "bash",
          ["-c", script],
          {
            env: {
              ...process.env,
              WEBHOOK_SECRET: secret,
              WEBHOOK_ID: headers["webhook-id"],
              WEBHOOK_TIMESTAMP: headers["webhook-timestamp"],
              WEBHOOK_SIGNATURE: headers["webhook-signature"],
              BODY: b,
            },
          },
          (err, stdout) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout }),
        ),
      );
    const good = await run(body);
    expect(good).toEqual({ code: 0, stdout: "incident.opened inc-1\n" });
    expect((await run(body.replace("Disk", "Fake"))).code).toBe(1);
  });
});

import { afterAll, describe, expect, it } from "vitest";
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

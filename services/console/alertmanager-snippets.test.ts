import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { alertmanagerAuthorizationBlock, alertmanagerHeadersBlock } from "./web/src/snippets.js";

// The console's Alertmanager snippets, checked with `amtool check-config` from Debian's
// prometheus-alertmanager (0.25 in Debian 12): the authorization form is accepted; the http_headers
// form (Alertmanager 0.28 and later) is what 0.25 refuses, which is why the console shows both.

const AMTOOL = process.env.AMTOOL_BIN ?? "amtool";
const dir = mkdtempSync(join(tmpdir(), "wr-amtool-"));
const SECRET = "a".repeat(64);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(name: string, receivers: string): { status: number | null; output: string } {
  const file = join(dir, `${name}.yml`);
  writeFileSync(file, `route:\n  receiver: warroom\n${receivers}\n`);
  const run = spawnSync(AMTOOL, ["check-config", file], { encoding: "utf8" });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

function amtoolVersion(): string {
  return execFileSync(AMTOOL, ["--version"], { encoding: "utf8" });
}

describe("Alertmanager snippets", () => {
  it("the authorization form passes amtool check-config, with the secret as the Bearer credential", () => {
    const result = check("authorization", alertmanagerAuthorizationBlock("https://warroom.example.com", SECRET));
    expect(result.output).toContain("SUCCESS");
    expect(result.output).toContain("1 receivers");
    expect(result.status).toBe(0);
  });

  it("the http_headers form is refused by an Alertmanager before 0.28 with the error the console's title warns of", () => {
    const version = amtoolVersion();
    const minor = Number(/version 0\.(\d+)\./.exec(version)?.[1] ?? "NaN");
    const result = check("headers", alertmanagerHeadersBlock("https://warroom.example.com", SECRET));
    if (minor < 28) {
      expect(result.status).not.toBe(0);
      expect(result.output).toContain("field http_headers not found");
    } else {
      expect(result.output).toContain("SUCCESS");
      expect(result.status).toBe(0);
    }
  });
});

import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");
const READMES = ["comms", "heartbeats", "identity", "incidents", "intake", "remotesource", "subscriptions"].map((name) => `services/${name}/README.md`);

function routeTables(cwd: string, ...args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile("npx", ["--no-install", "tsx", "scripts/route-tables.ts", ...args], { cwd, timeout: 60_000 }, (err, _stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stderr });
    });
  });
}

describe("route tables in the service READMEs", () => {
  it("match the proto's google.api.http annotations and comments", async () => {
    const { code, stderr } = await routeTables(ROOT, "--check");
    expect(stderr).not.toContain("differ");
    expect(code).toBe(0);
  });

  describe("in a copy whose README was edited by hand", () => {
    let copy: string;
    beforeAll(() => {
      copy = mkdtempSync(join(tmpdir(), "route-tables-"));
      for (const path of ["scripts", "gen", "proto", ".proto-deps", "buf.yaml", "package.json", ...READMES]) {
        cpSync(join(ROOT, path), join(copy, path), { recursive: true });
      }
      symlinkSync(join(ROOT, "node_modules"), join(copy, "node_modules"));
    });
    afterAll(() => rmSync(copy, { recursive: true, force: true }));

    it("--check names the README and fails; a run writes the table back", async () => {
      const readme = join(copy, "services/heartbeats/README.md");
      const original = readFileSync(readme, "utf8");
      writeFileSync(readme, original.replace("`PATCH /o/{org}/heartbeats/{heartbeat}`", "`PATCH /o/{org}/heartbeats/{name}`"));

      const check = await routeTables(copy, "--check");
      expect(check.code).toBe(1);
      expect(check.stderr).toContain("services/heartbeats/README.md");
      expect(check.stderr).not.toContain("services/comms/README.md");

      expect((await routeTables(copy)).code).toBe(0);
      expect(readFileSync(readme, "utf8")).toBe(original);
    });

    it("refuses a README without the markers", async () => {
      const readme = join(copy, "services/comms/README.md");
      writeFileSync(readme, readFileSync(readme, "utf8").replace("<!-- routes:end -->", ""));
      const { code, stderr } = await routeTables(copy, "--check");
      expect(code).not.toBe(0);
      expect(stderr).toContain("services/comms/README.md has no <!-- routes:begin --> ... <!-- routes:end --> markers");
    });
  });
});

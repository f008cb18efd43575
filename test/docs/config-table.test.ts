import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { configTable, linksFromPage, undescribedMessage } from "../../scripts/config-table.js";
import { configDescriptions } from "../../services/runtime/config/config.js";

const ROOT = join(import.meta.dirname, "../..");

function configTableCheck(): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile("npx", ["--no-install", "tsx", "scripts/config-table.ts", "--check"], { cwd: ROOT, timeout: 60_000 }, (err, _stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stderr });
    });
  });
}

describe("the configuration reference's table", () => {
  it("is the configuration schema's, every variable with its default and description", async () => {
    const { code, stderr } = await configTableCheck();
    expect(stderr).toBe("");
    expect(code).toBe(0);
    expect(configTable().undescribed).toEqual([]);
    expect(configTable().table).toContain("| `DATABASE_POOL_SIZE` | `10` |");
    expect(configTable().table).toContain("| `EGRESS_ALLOW_PRIVATE_CIDRS` | empty |");
    expect(configTable().table).toContain("| `DATABASE_URL` | unset |");
  });

  it("writes a description's links, given from the repository's root, relative to the page", () => {
    expect(linksFromPage("see [ops](docs/OPERATIONS.md#the-nats-servers-version) and [it](https://nats.io/a)")).toBe(
      "see [ops](../OPERATIONS.md#the-nats-servers-version) and [it](https://nats.io/a)",
    );
    expect(linksFromPage("[intake](services/intake/README.md)")).toBe("[intake](../../services/intake/README.md)");
    expect(configTable().table).toContain("[services/intake/README.md](../../services/intake/README.md)");
  });

  it("fails its check on a variable without a description, naming it and where to add it", () => {
    const { SECRETS_KEYS: _dropped, ...rest } = configDescriptions;
    const { undescribed } = configTable(rest);
    expect(undescribed).toEqual(["SECRETS_KEYS"]);
    expect(undescribedMessage(undescribed)).toMatch(
      /without a description: SECRETS_KEYS\nadd each to configDescriptions in services\/runtime\/config\/config.ts/,
    );
  });
});

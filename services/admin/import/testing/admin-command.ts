import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { nodeArgsFor } from "../../../../test/support/compiled-services.js";

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, "../../../..");

/** `npm run admin -- <args>` as an operator runs it, with `token` as WARROOM_TOKEN: its exit code and output. */
export async function admin(args: string[], token?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [...nodeArgsFor("services/admin/admin-cli.ts"), ...args], {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: "silent", WARROOM_TOKEN: token ?? "" },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

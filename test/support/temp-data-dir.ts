import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A DATA_DIR for the embedded database; as root the server runs as `postgres`, who must enter it. */
export function tempDataDir(prefix = "wr-data-"): { dir: string; cleanup(): void } {
  const parent = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(parent, 0o755);
  const dir = join(parent, "data");
  return { dir, cleanup: () => rmSync(parent, { recursive: true, force: true }) };
}

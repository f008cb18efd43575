// Copies the few googleapis files our schema imports from the google-proto-files package into
// .proto-deps/, so `buf` builds without reaching a schema registry.
import { cpSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
let root;
try {
  root = dirname(require.resolve("google-proto-files/package.json"));
} catch (err) {
  // `--optional` (npm install's postinstall): an install without the development packages
  // (--omit=dev) has no schema to build, so it does not need the files.
  if (process.argv.includes("--optional")) process.exit(0);
  throw err;
}
const files = ["google/api/annotations.proto", "google/api/http.proto"];
for (const file of files) {
  const target = join(".proto-deps", file);
  mkdirSync(dirname(target), { recursive: true });
  cpSync(join(root, file), target);
}

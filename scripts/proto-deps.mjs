// Copies the few googleapis files our schema imports from the google-proto-files package into
// .proto-deps/, so `buf` builds without reaching a schema registry.
import { cpSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const root = dirname(require.resolve("google-proto-files/package.json"));
const files = ["google/api/annotations.proto", "google/api/http.proto"];
for (const file of files) {
  const target = join(".proto-deps", file);
  mkdirSync(dirname(target), { recursive: true });
  cpSync(join(root, file), target);
}

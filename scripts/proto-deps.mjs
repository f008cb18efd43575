// Puts the few schema files our protos import but do not own into .proto-deps/, so `buf` builds
// without reaching a schema registry: the googleapis files come from the google-proto-files
// package; buf/validate/validate.proto (protovalidate v1.2.2, whose rules @bufbuild/protovalidate
// evaluates) is kept in scripts/proto-deps/, as no package ships its source.
import { cpSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

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
const vendored = join(dirname(fileURLToPath(import.meta.url)), "proto-deps");
const files = [
  [root, "google/api/annotations.proto"],
  [root, "google/api/http.proto"],
  [vendored, "buf/validate/validate.proto"],
];
for (const [from, file] of files) {
  const target = join(".proto-deps", file);
  mkdirSync(dirname(target), { recursive: true });
  cpSync(join(from, file), target);
}

import { readFileSync } from "node:fs";
import type { SourceAuth } from "../../index.js";
import { createPrometheusFilesSource } from "./source.js";

/**
 * Runs the example source from environment variables (see README.md beside this file):
 * PROMETHEUS_URL, LOG_DIR, SOURCE_TOKENS or TLS_CERT_FILE + TLS_KEY_FILE + CLIENT_CA_FILE,
 * PORT, HOST, PROMETHEUS_TENANT_HEADER.
 */

function required(name: string): string {
  const value = process.env[name]?.trim();
  if (!value) {
    console.error(`${name} is required (see README.md)`);
    process.exit(2);
  }
  return value;
}

const tokens = (process.env.SOURCE_TOKENS ?? "")
  .split(",")
  .map((t) => t.trim())
  .filter(Boolean);
const certFile = process.env.TLS_CERT_FILE?.trim();
const keyFile = process.env.TLS_KEY_FILE?.trim();
const clientCaFile = process.env.CLIENT_CA_FILE?.trim();

let auth: SourceAuth;
let tls: { cert: Buffer; key: Buffer } | undefined;
if (clientCaFile) {
  auth = { mtls: { ca: readFileSync(clientCaFile), cert: readFileSync(required("TLS_CERT_FILE")), key: readFileSync(required("TLS_KEY_FILE")) } };
} else if (tokens.length > 0) {
  auth = { bearerTokens: tokens };
  if (certFile && keyFile) tls = { cert: readFileSync(certFile), key: readFileSync(keyFile) };
} else {
  console.error("set SOURCE_TOKENS (bearer tokens, comma-separated) or CLIENT_CA_FILE with TLS_CERT_FILE and TLS_KEY_FILE (mutual TLS)");
  process.exit(2);
}

const source = createPrometheusFilesSource({
  prometheusUrl: required("PROMETHEUS_URL"),
  logDir: required("LOG_DIR"),
  auth,
  ...(tls ? { tls } : {}),
  ...(process.env.PROMETHEUS_TENANT_HEADER ? { tenantHeader: process.env.PROMETHEUS_TENANT_HEADER } : {}),
});
// No top-level await: copied into a package without "type": "module", tsx runs this file as
// CommonJS, where it is a syntax error.
source.listen({ port: Number(process.env.PORT ?? 9400), host: process.env.HOST ?? "0.0.0.0" }).then(
  (running) => {
    console.log(`prometheus-files source serving HTTP-JSON and gRPC on port ${running.port}`);
    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      process.once(signal, () => {
        void running.close().then(() => process.exit(0));
      });
    }
  },
  (err: unknown) => {
    console.error(`could not listen: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);

import { describe, expect, it } from "vitest";
import { unknownVariableWarnings } from "./config-warnings.js";

describe("unknown configuration variables", () => {
  it("names a typo of a known variable with the one it is close to", () => {
    expect(unknownVariableWarnings({ DATABSE_URL: "postgres://db/w" })).toEqual(["unknown variable DATABSE_URL: did you mean DATABASE_URL?"]);
    expect(unknownVariableWarnings({ SECRET_KEYS: "k1:…" })).toEqual(["unknown variable SECRET_KEYS: did you mean SECRETS_KEYS?"]);
    expect(unknownVariableWarnings({ LOGLEVEL: "debug" })).toEqual(["unknown variable LOGLEVEL: did you mean LOG_LEVEL?"]);
    expect(unknownVariableWarnings({ NAST_URL: "nats://bus" })).toEqual(["unknown variable NAST_URL: did you mean NATS_URL?"]);
  });

  it("names a variable of the service's families that it does not read, never its value", () => {
    const warnings = unknownVariableWarnings({ NATS_SERVERS: "nats://a,nats://b", DATABASE_PASSWORD: "hunter2" });
    expect(warnings).toEqual([
      "unknown variable DATABASE_PASSWORD: the service reads no such variable (docs/reference/configuration.md lists those it reads)",
      "unknown variable NATS_SERVERS: the service reads no such variable (docs/reference/configuration.md lists those it reads)",
    ]);
    expect(warnings.join("\n")).not.toContain("hunter2");
  });

  it("leaves known variables, other programs' variables and Kubernetes service links alone", () => {
    expect(
      unknownVariableWarnings({
        DATABASE_URL: "postgres://db/w",
        NATS_URL: "nats://bus",
        HOME: "/home/x",
        HOSTNAME: "pod-1",
        PATH: "/bin",
        HTTP_PROXY: "http://proxy",
        NODE_ENV: "production",
        NATS_SERVICE_HOST: "10.0.0.1",
        NATS_PORT: "tcp://10.0.0.1:4222",
        NATS_PORT_4222_TCP_ADDR: "10.0.0.1",
        GATEWAY_SERVICE_PORT_HTTP: "8080",
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      }),
    ).toEqual([]);
  });
});

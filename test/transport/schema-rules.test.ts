import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AlertSchema, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * The schema's rules (proto/warroom/incidents/v1/incidents.proto) answer the same on every
 * surface: an internal call over NATS or in process, and a public one over Connect, gRPC or REST.
 */

const ORG_ID = "00000000-0000-4000-8000-0000000000aa";
const goodAlert: MessageInitShape<typeof AlertSchema> = {
  source: "metrics-monitor",
  kind: "alert",
  title: "CPU high on checkout",
  severity: "sev2",
  attachIdentity: "schema-rules",
};

const badDeliveries: [string, { orgId: string; alert: MessageInitShape<typeof AlertSchema> }, string][] = [
  ["an out-of-vocabulary severity", { orgId: ORG_ID, alert: { ...goodAlert, severity: "critical" } }, "alert.severity must be one of sev1, sev2, sev3, sev4"],
  ["a too-long title", { orgId: ORG_ID, alert: { ...goodAlert, title: "t".repeat(2049) } }, "alert.title must be at most 2048 characters"],
  ["a non-UUID organization id", { orgId: "acme", alert: goodAlert }, "orgId must be a UUID"],
];

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  return call.then(
    () => {
      throw new Error("the call was accepted");
    },
    (err: unknown) => ConnectError.from(err),
  );
}

describe.each([
  ["in process", false],
  ["over NATS", true],
])("Record %s", (_name, nats) => {
  let app: TestApp;
  let internal: Transport;

  beforeAll(async () => {
    app = await startApp({ nats });
    internal = app.process.transport;
  }, 120_000);
  afterAll(async () => {
    await app?.stop();
  });

  it.each(badDeliveries)("refuses %s with InvalidArgument in the schema's words", async (_case, delivery, message) => {
    const err = await refusal(createClient(IncidentsService, internal).record({ ...delivery, orgSlug: "acme" }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe(message);
  });

  it("decides a batch's valid deliveries and refuses the others by index", async () => {
    const res = await createClient(IncidentsService, internal).recordMany({
      deliveries: badDeliveries.map(([, delivery]) => ({ ...delivery, orgSlug: "acme" })),
    });
    expect(res.errors).toEqual(Object.fromEntries(badDeliveries.map(([, , message], i) => [i, message])));
  });
});

describe("CreateMaintenanceWindow over Connect, gRPC and REST", () => {
  let app: TestApp;
  let token: string;
  const tooLong = { reason: "r".repeat(1001), startsAt: new Date(Date.now() + 3600_000), endsAt: new Date(Date.now() + 7200_000) };
  const message = "reason must be at most 1000 characters";

  beforeAll(async () => {
    app = await startApp();
    token = await app.ownerToken();
  }, 120_000);
  afterAll(async () => {
    await app?.stop();
  });

  it.each([
    ["Connect", () => createConnectTransport({ baseUrl: app.url, httpVersion: "1.1" })],
    ["gRPC", () => createGrpcTransport({ baseUrl: app.url })],
  ])("refuses a too-long reason over %s with InvalidArgument", async (_name, transport) => {
    const client = createClient(IncidentsService, transport());
    const err = await refusal(
      client.createMaintenanceWindow(
        {
          org: "acme",
          reason: tooLong.reason,
          startsAt: { seconds: BigInt(Math.floor(tooLong.startsAt.getTime() / 1000)) },
          endsAt: { seconds: BigInt(Math.floor(tooLong.endsAt.getTime() / 1000)) },
        },
        { headers: { authorization: `Bearer ${token}` } },
      ),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe(message);
  });

  it("answers 400 with the same words over REST", async () => {
    const res = await app.call("POST", "/o/acme/maintenance-windows", {
      token,
      body: { reason: tooLong.reason, startsAt: tooLong.startsAt.toISOString(), endsAt: tooLong.endsAt.toISOString() },
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: message });
  });
});

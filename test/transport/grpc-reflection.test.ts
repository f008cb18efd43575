import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createFileRegistry, fromBinary, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import { createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as v1 from "../../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * gRPC server reflection on the public port, through a reflection client written against the
 * reflection protocol itself (as grpcurl does it), and through `buf curl --list-methods`.
 */

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

const PUBLIC_SERVICES = [
  "grpc.health.v1.Health",
  "grpc.reflection.v1.ServerReflection",
  "grpc.reflection.v1alpha.ServerReflection",
  "warroom.comms.v1.CommsService",
  "warroom.heartbeats.v1.HeartbeatsService",
  "warroom.identity.v1.IdentityService",
  "warroom.incidents.v1.IncidentsService",
  "warroom.intake.v1.IntakeService",
  "warroom.remotesource.v1.RemoteSourcesService",
  "warroom.subscriptions.v1.SubscriptionsService",
];

type Reflection = typeof v1.ServerReflection | typeof v1alpha.ServerReflection;

/** One request on a fresh stream, its one answer. */
async function reflect(transport: Transport, service: Reflection, messageRequest: v1.ServerReflectionRequest["messageRequest"]) {
  const client = createClient(service as typeof v1.ServerReflection, transport);
  async function* requests() {
    yield create(v1.ServerReflectionRequestSchema, { host: "", messageRequest });
  }
  for await (const response of client.serverReflectionInfo(requests())) return response.messageResponse;
  throw new Error("no answer");
}

function files(answer: Awaited<ReturnType<typeof reflect>>): FileDescriptorProto[] {
  if (answer.case !== "fileDescriptorResponse") throw new Error(`expected files, got ${answer.case}: ${JSON.stringify(answer.value)}`);
  return answer.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
}

/** The order a registry is built in: every file after the files it imports. */
function importsFirst(list: FileDescriptorProto[]): FileDescriptorProto[] {
  const byName = new Map(list.map((file) => [file.name, file]));
  const out: FileDescriptorProto[] = [];
  const seen = new Set<string>();
  const visit = (file: FileDescriptorProto) => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    for (const dep of file.dependency) visit(byName.get(dep)!);
    out.push(file);
  };
  list.forEach(visit);
  return out;
}

describe("gRPC server reflection", () => {
  let app: TestApp;
  let transport: Transport;

  beforeAll(async () => {
    app = await startApp();
    transport = createGrpcTransport({ baseUrl: app.url });
  });

  afterAll(async () => {
    await app?.stop();
  });

  describe.each([
    ["v1", v1.ServerReflection],
    ["v1alpha", v1alpha.ServerReflection],
  ] as const)("grpc.reflection.%s", (_version, service) => {
    it("lists the public services only", async () => {
      const answer = await reflect(transport, service, { case: "listServices", value: "" });
      expect(answer.case).toBe("listServicesResponse");
      expect((answer.value as v1.ListServiceResponse).service.map((s) => s.name)).toEqual(PUBLIC_SERVICES);
    });

    it("describes a service without its internal methods, with every import, enough to call it", async () => {
      const described = files(await reflect(transport, service, { case: "fileContainingSymbol", value: "warroom.incidents.v1.IncidentsService" }));
      expect(described[0]!.name).toBe("warroom/incidents/v1/incidents.proto");
      const incidents = described[0]!.service.find((s) => s.name === "IncidentsService")!;
      const methods = incidents.method.map((m) => m.name);
      expect(methods).toContain("GetIncident");
      expect(methods).toContain("CreateMaintenanceWindow");
      for (const internal of ["Record", "AppendTimeline", "FindLatestOpen"]) expect(methods).not.toContain(internal);
      expect(described.map((f) => f.name)).toEqual(
        expect.arrayContaining(["google/protobuf/timestamp.proto", "google/api/annotations.proto", "google/api/http.proto"]),
      );

      // What a reflection client does next: build the schema from the answer, and call.
      const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: importsFirst(described) }));
      const reflected = registry.getService("warroom.incidents.v1.IncidentsService") as DescService;
      const client = createClient(reflected, transport) as unknown as Record<string, (req: object) => Promise<unknown>>;
      await expect(client.listIncidents!({ org: "acme" })).rejects.toMatchObject({ code: 16 });
    });

    it("answers NOT_FOUND for an internal method, an unknown symbol and an unknown file", async () => {
      for (const symbol of ["warroom.incidents.v1.IncidentsService.Record", "warroom.identity.v1.IdentityService.ResolveIngestToken", "no.such.Thing"]) {
        const answer = await reflect(transport, service, { case: "fileContainingSymbol", value: symbol });
        expect(answer).toMatchObject({ case: "errorResponse", value: { errorCode: 5 } });
      }
      expect(await reflect(transport, service, { case: "fileByFilename", value: "warroom/events/v1/events.proto" })).toMatchObject({
        case: "errorResponse",
        value: { errorCode: 5 },
      });
      const health = files(await reflect(transport, service, { case: "fileByFilename", value: "grpc/health/v1/health.proto" }));
      expect(health[0]!.service[0]!.method.map((m) => m.name)).toEqual(["Check", "Watch"]);
      const method = files(await reflect(transport, service, { case: "fileContainingSymbol", value: "warroom.intake.v1.IntakeService.EnqueuePagerDutyEvent" }));
      expect(method[0]!.name).toBe("warroom/intake/v1/intake.proto");
    });
  });

  it("buf curl --list-methods works without the proto files", async () => {
    const { stdout } = await promisify(execFile)(
      join(repoRoot, "node_modules", ".bin", "buf"),
      ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", app.url],
      {
        cwd: "/",
        timeout: 30_000,
      },
    );
    const methods = stdout.trim().split("\n");
    expect(methods).toContain("warroom.intake.v1.IntakeService/Deliver");
    expect(methods).toContain("warroom.intake.v1.IntakeService/CreateOpsgenieAlert");
    expect(methods).toContain("grpc.health.v1.Health/Check");
    expect(methods.some((m) => m.endsWith("/Record") || m.endsWith("/ResolveIngestToken") || m.endsWith("/Bootstrap"))).toBe(false);
  });
});

import { clone, create, toBinary, type DescFile, type DescMessage, type DescEnum, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter } from "@connectrpc/connect";
import { Health } from "../../../gen/grpc/health/v1/health_pb.js";
import * as v1 from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { isPublicMethod } from "./public-surface.js";

/**
 * gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) for what the public port serves,
 * from the generated descriptors, so grpcurl and `buf curl` work without the proto files.
 *
 * The descriptors handed out are copies with the internal methods (those without a
 * google.api.http route: Record, Bootstrap, ResolveIngestToken, ...) removed, and services with
 * no public method left out: what is never served on this port is never described on it either.
 */

const GRPC_NOT_FOUND = 5;

interface ReflectionIndex {
  services: string[];
  /** File name (as in `import`) to its public copy, serialized. */
  files: Map<string, Uint8Array>;
  /** File name to the names of the files it imports. */
  imports: Map<string, string[]>;
  /** Fully-qualified symbol to the file that declares it. */
  symbols: Map<string, string>;
}

function publicCopy(file: DescFile, kept: ReadonlySet<string>): FileDescriptorProto {
  const copy = clone(FileDescriptorProtoSchema, file.proto);
  const pkg = copy.package ? `${copy.package}.` : "";
  copy.service = copy.service
    .filter((service) => kept.has(pkg + service.name))
    .map((service) => {
      const desc = file.services.find((s) => s.name === service.name)!;
      const isPublicService = desc.methods.some(isPublicMethod);
      // Health and reflection have no HTTP route and are served whole.
      service.method = isPublicService ? service.method.filter((m) => isPublicMethod(desc.methods.find((d) => d.name === m.name)!)) : service.method;
      return service;
    });
  // Source info may name what was removed; clients do not need it.
  copy.sourceCodeInfo = undefined;
  return copy;
}

/**
 * The reflection answers of the public surface: the served services that have public methods, plus
 * health and reflection, with their file descriptors stripped of internal methods.
 */
export function buildReflectionIndex(served: readonly DescService[]): ReflectionIndex {
  const exposed = served.filter((service) => service.methods.some(isPublicMethod));
  const kept = new Set([...exposed, Health, v1.ServerReflection, v1alpha.ServerReflection].map((service) => service.typeName));
  const index: ReflectionIndex = { services: [...kept].sort(), files: new Map(), imports: new Map(), symbols: new Map() };
  const visit = (file: DescFile) => {
    const name = file.proto.name;
    if (index.files.has(name)) return;
    const copy = publicCopy(file, kept);
    index.files.set(name, toBinary(FileDescriptorProtoSchema, copy));
    index.imports.set(
      name,
      file.dependencies.map((dep) => dep.proto.name),
    );
    const declare = (symbol: string) => index.symbols.set(symbol, name);
    const messages = (list: readonly DescMessage[]) => {
      for (const message of list) {
        declare(message.typeName);
        for (const field of message.fields) declare(`${message.typeName}.${field.name}`);
        enums(message.nestedEnums);
        messages(message.nestedMessages);
        for (const extension of message.nestedExtensions) declare(extension.typeName);
      }
    };
    const enums = (list: readonly DescEnum[]) => {
      for (const desc of list) {
        declare(desc.typeName);
        for (const value of desc.values) declare(`${desc.typeName.split(".").slice(0, -1).concat(value.name).join(".")}`);
      }
    };
    messages(file.messages);
    enums(file.enums);
    for (const extension of file.extensions) declare(extension.typeName);
    const pkg = copy.package ? `${copy.package}.` : "";
    for (const service of copy.service) {
      declare(pkg + service.name);
      for (const method of service.method) declare(`${pkg}${service.name}.${method.name}`);
    }
    for (const dep of file.dependencies) visit(dep);
  };
  for (const service of [...exposed, Health, v1.ServerReflection, v1alpha.ServerReflection]) visit(service.file);
  return index;
}

/** The file and everything it imports, each once, the file first. */
function withImports(index: ReflectionIndex, name: string): Uint8Array[] {
  const seen = new Set<string>();
  const out: Uint8Array[] = [];
  const walk = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const bytes = index.files.get(file);
    if (bytes) out.push(bytes);
    for (const dep of index.imports.get(file) ?? []) walk(dep);
  };
  walk(name);
  return out;
}

type Request = v1.ServerReflectionRequest | v1alpha.ServerReflectionRequest;

function answer(index: ReflectionIndex, req: Request) {
  const notFound = (what: string) => ({ case: "errorResponse" as const, value: { errorCode: GRPC_NOT_FOUND, errorMessage: `${what} not found` } });
  const files = (name: string | undefined, what: string) =>
    name !== undefined && index.files.has(name)
      ? { case: "fileDescriptorResponse" as const, value: { fileDescriptorProto: withImports(index, name) } }
      : notFound(what);
  const request = req.messageRequest;
  switch (request.case) {
    case "listServices":
      return { case: "listServicesResponse" as const, value: { service: index.services.map((name) => ({ name })) } };
    case "fileByFilename":
      return files(request.value, `file ${request.value}`);
    case "fileContainingSymbol":
      return files(index.symbols.get(request.value.replace(/^\./, "")), `symbol ${request.value}`);
    case "fileContainingExtension":
      // No public file extends another's messages with extensions of its own.
      return notFound(`extension ${request.value.extensionNumber} of ${request.value.containingType}`);
    case "allExtensionNumbersOfType":
      return index.symbols.has(request.value)
        ? { case: "allExtensionNumbersResponse" as const, value: { baseTypeName: request.value, extensionNumber: [] } }
        : notFound(`type ${request.value}`);
    default:
      return { case: "errorResponse" as const, value: { errorCode: 3, errorMessage: "the request names nothing to reflect on" } };
  }
}

/**
 * Serves gRPC server reflection (v1 and v1alpha) for the public surface of `served`, so `grpcurl`
 * and `buf curl` need no schema.
 */
export function registerGrpcReflection(router: ConnectRouter, served: readonly DescService[]): void {
  // Built at the first reflection request: copying every descriptor took about 130 ms of each
  // process's start, for a service that most processes never answer.
  let built: ReflectionIndex | undefined;
  const index = () => (built ??= buildReflectionIndex(served));
  router.service(v1.ServerReflection, {
    async *serverReflectionInfo(requests: AsyncIterable<v1.ServerReflectionRequest>) {
      for await (const req of requests) {
        yield create(v1.ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: answer(index(), req) });
      }
    },
  });
  router.service(v1alpha.ServerReflection, {
    async *serverReflectionInfo(requests: AsyncIterable<v1alpha.ServerReflectionRequest>) {
      for await (const req of requests) {
        yield create(v1alpha.ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: answer(index(), req) });
      }
    },
  });
}

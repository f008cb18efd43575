import { getOption, hasOption, type DescMethodUnary } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { SourceService } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";

/** A call of the protocol, named as in the spec's HTTP paths without `/v1/`. */
export type ProtocolCall = "capabilities" | "health" | "invoke" | "metrics/list" | "metrics/range" | "logs/streams" | "logs/range";

/** The calls that answer a RawResult: what the service reads through a connection. */
export type ReadCall = Exclude<ProtocolCall, "capabilities" | "health">;
export const READ_CALLS: readonly ReadCall[] = ["invoke", "metrics/list", "metrics/range", "logs/streams", "logs/range"];

export interface ProtocolRoute {
  call: ProtocolCall;
  httpMethod: "GET" | "POST";
  /** e.g. /v1/metrics/range */
  path: string;
  /** The gRPC method: /warroom.sourceprotocol.v1.SourceService/<Name>. */
  method: DescMethodUnary;
}

/**
 * The protocol's routes, read from the `google.api.http` annotations of the schema: the kit serves
 * these paths and the client calls them, so neither can drift from the schema.
 */
export const PROTOCOL_ROUTES: readonly ProtocolRoute[] = SourceService.methods.map((method) => {
  if (method.methodKind !== "unary" || !hasOption(method, http)) {
    throw new Error(`${method.name} has no HTTP annotation`);
  }
  const pattern = getOption(method, http).pattern;
  if (pattern.case !== "get" && pattern.case !== "post") throw new Error(`${method.name} must be GET or POST`);
  const path = pattern.value;
  return {
    call: path.replace(/^\/v1\//, "") as ProtocolCall,
    httpMethod: pattern.case === "get" ? "GET" : "POST",
    path,
    method: method as DescMethodUnary,
  };
});

/** The protocol route of a call (its HTTP path and gRPC method). */
export function routeOf(call: ProtocolCall): ProtocolRoute {
  const route = PROTOCOL_ROUTES.find((r) => r.call === call);
  if (!route) throw new Error(`unknown protocol call ${call}`);
  return route;
}

/**
 * Whether the value names a call a read may make (invoke, metrics/list, metrics/range,
 * logs/streams, logs/range).
 */
export function isReadCall(value: string): value is ReadCall {
  return (READ_CALLS as readonly string[]).includes(value);
}

/** The gRPC path of a method, e.g. /warroom.sourceprotocol.v1.SourceService/MetricsRange. */
export function grpcPath(method: DescMethodUnary): string {
  return `/${method.parent.typeName}/${method.name}`;
}

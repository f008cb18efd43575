/**
 * The hosting kit of the remote source protocol, version 1: give it what your source can read and
 * it serves the protocol over HTTP-JSON and gRPC on one port. See README.md beside this file.
 */
export { createSourceServer, type SourceServer } from "./server/source-server.js";
export {
  SourceError,
  type CallContext,
  type CanonicalRole,
  type DescriptorKind,
  type EntryInput,
  type LogsHandlers,
  type LogsRangeCall,
  type LogsStreamsCall,
  type MetricsHandlers,
  type MetricsListCall,
  type MetricsRangeCall,
  type OperationDescriptorInput,
  type ReadResult,
  type SeriesInput,
  type SourceAuth,
  type SourceKind,
  type SourceOperation,
  type SourceServerOptions,
  type WindowFormat,
} from "./server/definition.js";
export type { RunningSourceServer } from "./server/listen.js";
export { formatWindowValue, parseWindowValue } from "./protocol/window-format.js";
export { MAX_RESPONSE_BYTES, PROTOCOL_VERSION } from "./protocol/limits.js";

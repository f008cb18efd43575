import http from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";
import { BinaryReader, type WireType } from "@bufbuild/protobuf/wire";

/**
 * A test OTLP/HTTP receiver: accepts `POST /v1/traces` with a protobuf ExportTraceServiceRequest
 * (opentelemetry/proto/collector/trace/v1) and keeps the spans, decoded from the wire format.
 */

export type AttributeValue = string | number | boolean | bigint | undefined;

export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startNanos: bigint;
  endNanos: bigint;
  attributes: Record<string, AttributeValue>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
  /** The spans of other traces this one links to (a batch carrying many callers' work). */
  links: { traceId: string; spanId: string }[];
}

export interface OtlpReceiver {
  /** The endpoint for OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  spans: ReceivedSpan[];
  /** Requests that could not be decoded (a failing test names them). */
  errors: string[];
  close(): Promise<void>;
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

function fields(bytes: Uint8Array, onField: (field: number, wireType: WireType, reader: BinaryReader) => void): void {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    const before = reader.pos;
    onField(field, wireType, reader);
    // A field the handler did not read is stepped over by its wire type (protobuf decoding, not a test skip).
    if (reader.pos === before) reader.skip(wireType, field);
  }
}

function anyValue(bytes: Uint8Array): AttributeValue {
  let value: AttributeValue;
  fields(bytes, (field, _wt, r) => {
    if (field === 1) value = r.string();
    else if (field === 2) value = r.bool();
    else if (field === 3) value = r.int64() as unknown as bigint;
    else if (field === 4) value = r.double();
  });
  return value;
}

function keyValues(into: Record<string, AttributeValue>, bytes: Uint8Array): void {
  let key = "";
  let value: AttributeValue;
  fields(bytes, (field, _wt, r) => {
    if (field === 1) key = r.string();
    else if (field === 2) value = anyValue(r.bytes());
  });
  into[key] = value;
}

function decodeSpan(service: string, bytes: Uint8Array): ReceivedSpan {
  const span: ReceivedSpan = {
    service,
    traceId: "",
    spanId: "",
    parentSpanId: "",
    name: "",
    kind: 0,
    startNanos: 0n,
    endNanos: 0n,
    attributes: {},
    statusCode: 0,
    links: [],
  };
  fields(bytes, (field, _wt, r) => {
    if (field === 1) span.traceId = hex(r.bytes());
    else if (field === 2) span.spanId = hex(r.bytes());
    else if (field === 4) span.parentSpanId = hex(r.bytes());
    else if (field === 5) span.name = r.string();
    else if (field === 6) span.kind = r.int32();
    else if (field === 7) span.startNanos = BigInt(r.fixed64());
    else if (field === 8) span.endNanos = BigInt(r.fixed64());
    else if (field === 9) keyValues(span.attributes, r.bytes());
    else if (field === 13) {
      const link = { traceId: "", spanId: "" };
      fields(r.bytes(), (f, _w, l) => {
        if (f === 1) link.traceId = hex(l.bytes());
        else if (f === 2) link.spanId = hex(l.bytes());
      });
      span.links.push(link);
    } else if (field === 15)
      fields(r.bytes(), (f, _w, s) => {
        if (f === 3) span.statusCode = s.int32();
      });
  });
  return span;
}

export function decodeExportTraceServiceRequest(body: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  fields(body, (field, _wt, r) => {
    if (field !== 1) return;
    const resourceSpans = r.bytes();
    const resource: Record<string, AttributeValue> = {};
    const scopeSpans: Uint8Array[] = [];
    fields(resourceSpans, (f, _w, rs) => {
      if (f === 1) fields(rs.bytes(), (rf, _rw, rr) => (rf === 1 ? keyValues(resource, rr.bytes()) : undefined));
      else if (f === 2) scopeSpans.push(rs.bytes());
    });
    const service = String(resource["service.name"] ?? "");
    for (const scope of scopeSpans) fields(scope, (sf, _sw, sr) => (sf === 2 ? spans.push(decodeSpan(service, sr.bytes())) : undefined));
  });
  return spans;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const errors: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      try {
        let body = Buffer.concat(chunks);
        if (req.headers["content-encoding"] === "gzip") body = gunzipSync(body);
        if (!String(req.headers["content-type"]).startsWith("application/x-protobuf")) throw new Error(`content-type ${req.headers["content-type"]}`);
        spans.push(...decodeExportTraceServiceRequest(body));
        // An empty ExportTraceServiceResponse.
        res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      } catch (err) {
        errors.push(String(err));
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    errors,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

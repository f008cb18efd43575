import { readdirSync, readFileSync } from "node:fs";
import { create, type DescMessage, type JsonObject, toBinary } from "@bufbuild/protobuf";
import { ListValueSchema, timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ServerReflectionResponseSchema } from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import { ListMembersResponseSchema } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { RecordManyRequestSchema, RecordManyResponseSchema, RecordRequestSchema } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { encodedSizeAtMost } from "./message-size.js";

const FIXTURES = new URL("../../../test/fixtures/", import.meta.url);

/** Every JSON fixture real senders sent, as the `data` an alert carries. */
function fixtureObjects(): JsonObject[] {
  const out: JsonObject[] = [];
  const walk = (dir: URL) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(new URL(`${entry.name}/`, dir));
      else if (entry.name.endsWith(".json")) {
        const parsed: unknown = JSON.parse(readFileSync(new URL(entry.name, dir), "utf8"));
        if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) out.push(parsed as JsonObject);
      }
    }
  };
  walk(FIXTURES);
  return out;
}

function exact(schema: DescMessage, message: object): number {
  return toBinary(schema, message as never).byteLength;
}

/** The bound never says "within" for a message over the limit, and answers the exact size when it had to encode. */
function expectSound(schema: DescMessage, message: object) {
  const bytes = exact(schema, message);
  expect(encodedSizeAtMost(schema, message, bytes).within).toBe(true);
  expect(encodedSizeAtMost(schema, message, bytes - 1)).toEqual({ within: false, bytes });
}

function alert(data: JsonObject, text = "disk full on db-1") {
  return create(RecordRequestSchema, {
    orgId: "7b1c3a52-0c43-4a53-9b5b-6d1f0c7e2a11",
    orgSlug: "acme",
    alert: {
      source: "metrics-monitor",
      kind: "alert",
      title: text,
      severity: "critical",
      attachIdentity: `metrics-monitor:${text}`,
      eventId: "evt-1",
      entity: { kind: "host", id: "db-1" },
      summary: text.repeat(3),
      occurredAt: timestampFromDate(new Date("2026-11-24T07:00:00Z")),
      data,
    },
  });
}

describe("encodedSizeAtMost: a bound of the protobuf size, exact only when it must be", () => {
  it("is sound for every fixture carried as an alert's data, and one under its size is refused with the exact size", () => {
    const fixtures = fixtureObjects();
    expect(fixtures.length).toBeGreaterThan(10);
    for (const data of fixtures) expectSound(RecordRequestSchema, alert(data));
  });

  it("is sound for text of every width (ASCII, accents, CJK, emoji as surrogate pairs)", () => {
    for (const text of ["a", "é".repeat(500), "漢字".repeat(700), "🔥".repeat(900), "\u0000\uffff"]) {
      expectSound(RecordRequestSchema, alert({ [text]: text, nested: { list: [text, 1, true, null, { deeper: [text] }] } }, text));
    }
  });

  it("is sound for numbers in JSON, which protobuf widens to eight-byte doubles", () => {
    expectSound(RecordRequestSchema, alert({ series: Array.from({ length: 5000 }, (_, i) => i % 10) }));
  });

  it("is sound for lists of messages, maps, oneofs, proto3 optional fields, bytes, Value and ListValue", () => {
    expectSound(ListMembersResponseSchema, create(ListMembersResponseSchema, { nextCursor: "c".repeat(1000) }));
    const batch = create(RecordManyRequestSchema, { deliveries: Array.from({ length: 50 }, (_, i) => alert({ i }, `alert ${i}`)) });
    expectSound(RecordManyRequestSchema, batch);
    expectSound(RecordManyResponseSchema, create(RecordManyResponseSchema, { errors: { 0: "refused", 12345: "x".repeat(300) } }));
    expectSound(
      ServerReflectionResponseSchema,
      create(ServerReflectionResponseSchema, {
        validHost: "host",
        messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: [new Uint8Array(700), new Uint8Array(3)] } },
      }),
    );
    expectSound(ValueSchema, create(ValueSchema, { kind: { case: "structValue", value: { fields: { a: { kind: { case: "numberValue", value: 1 } } } } } }));
    expectSound(
      ListValueSchema,
      create(ListValueSchema, { values: [{ kind: { case: "stringValue", value: "漢" } }, { kind: { case: "boolValue", value: true } }] }),
    );
  });

  it("answers within without encoding a small message, and measures a large one exactly", () => {
    const small = alert({ a: "b" });
    expect(encodedSizeAtMost(RecordRequestSchema, small, 16 * 1024 * 1024)).toEqual({ within: true });
    const large = alert({ blob: "x".repeat(200_000) });
    const bytes = exact(RecordRequestSchema, large);
    expect(encodedSizeAtMost(RecordRequestSchema, large, 300_000)).toEqual({ within: true, bytes });
    expect(encodedSizeAtMost(RecordRequestSchema, large, 100_000)).toEqual({ within: false, bytes });
  });
});

import { describe, expect, it } from "vitest";
import type { Logger } from "../../runtime/observability/logger.js";
import { customSourceRecordsDropped } from "../../runtime/observability/metrics.js";
import { NEVER_ABORTS, requestIdServerInterceptor, throwIfCallerGaveUp } from "../../runtime/http/request-context.js";
import { createRecordWriter } from "./custom-source-delivery.js";
import { boundedBody, KEPT_BODY_BYTES, parseCustomBody } from "./custom-source-records.js";
import type { DeliveryRecordStore, DeliveryRecord } from "./store.js";

// A body small enough when it arrived is kept without writing it out to measure it: the bodies
// that grow most when written back as JSON, as large as that shortcut takes, still fit.
describe("a kept body's size", () => {
  const largestUnmeasured = Math.floor(KEPT_BODY_BYTES / 6) - 1;
  const fill = (unit: string, open = "", close = "", separator = "") => {
    const parts: string[] = [];
    let length = open.length + close.length;
    while (length + unit.length + separator.length <= largestUnmeasured) {
      parts.push(unit);
      length += unit.length + separator.length;
    }
    return `${open}${parts.join(separator)}${close}`;
  };
  const worst: [string, string, string][] = [
    ["numbers printed in full", fill("1e20", "[", "]", ","), "application/json"],
    ["control characters in a text body", fill("\u0001"), "text/plain"],
    ["quotes in a text body", fill('"'), "text/plain"],
    ["bytes that are not UTF-8", "", "text/plain"],
    ["form fields without values", fill("a", "", "", "&"), "application/x-www-form-urlencoded"],
    ["escaped form keys", fill("%01", "", "", "&"), "application/x-www-form-urlencoded"],
  ];

  it.each(worst)("%s fit when kept unmeasured", (_, text, contentType) => {
    const bytes = text === "" ? new Uint8Array(largestUnmeasured).fill(0xff) : Buffer.from(text, "utf8");
    expect(bytes.byteLength).toBeLessThanOrEqual(largestUnmeasured);
    const body = parseCustomBody(bytes, contentType);
    const kept = boundedBody(body, bytes.byteLength);
    expect(kept.truncated).toBe(false);
    expect(Buffer.byteLength(JSON.stringify(kept.body), "utf8")).toBeLessThanOrEqual(KEPT_BODY_BYTES);
  });

  it("measures a larger body, and cuts one that does not fit", () => {
    const body = { text: "x".repeat(KEPT_BODY_BYTES) };
    const kept = boundedBody(body, KEPT_BODY_BYTES + 20);
    expect(kept.truncated).toBe(true);
    expect(Buffer.byteLength(kept.body as string, "utf8")).toBeLessThanOrEqual(KEPT_BODY_BYTES);
    expect(boundedBody({ text: "small" }, KEPT_BODY_BYTES)).toEqual({ body: { text: "small" }, truncated: false });
  });
});

// With Postgres stalled, the records waiting to be written are bounded in bytes as well as in
// number: large kept payloads would otherwise fill the heap long before the count bound.
describe("the record writer with a stalled store", () => {
  const silent = { warn: () => {}, error: () => {}, info: () => {}, debug: () => {} } as unknown as Logger;
  const stalled = { keepAndLogMany: () => new Promise<void>(() => {}) } as unknown as DeliveryRecordStore;
  const record = (text: string): DeliveryRecord => ({
    sourceId: "00000000-0000-4000-8000-000000000001",
    receivedAt: new Date(),
    payload: { body: { text }, headers: { "content-type": "application/json" }, query: {}, truncated: false },
    entry: { outcome: "opened", warnings: [] },
  });

  it("never holds more than its bytes, drops the oldest past them and counts what it dropped", async () => {
    const bound = 1024 * 1024;
    const writer = createRecordWriter(stalled, silent, 10_000, bound);
    const droppedBefore = (await customSourceRecordsDropped.get()).values[0]?.value ?? 0;
    const large = "x".repeat(KEPT_BODY_BYTES - 100);
    let most = 0;
    for (let i = 0; i < 200; i++) {
      writer.write(record(large));
      most = Math.max(most, writer.waiting().bytes);
    }
    expect(most).toBeLessThanOrEqual(bound);
    expect(writer.waiting().bytes).toBeGreaterThan(bound / 2);
    const held = writer.waiting().records;
    expect(held).toBeLessThan(200);
    const dropped = ((await customSourceRecordsDropped.get()).values[0]?.value ?? 0) - droppedBefore;
    // Every record is written (here: the first group, stuck in the store), waiting, or dropped.
    expect(dropped + held + writer.waiting().writing).toBe(200);
    expect(dropped).toBeGreaterThan(0);
  });
});

// Records are written after the answers, so never within the deadline of the call that answered:
// under load a group's write came after that call's deadline and was refused for it.
describe("the record writer after the call that queued a record", () => {
  const silent = { warn: () => {}, error: () => {}, info: () => {}, debug: () => {} } as unknown as Logger;

  it("writes the record even once the deadline of the call that queued it has passed", async () => {
    const written: DeliveryRecord[] = [];
    const store = {
      // As the database's statements do: refused once the call being served has given up.
      keepAndLogMany: async (group: DeliveryRecord[]) => {
        // Well past the 50 ms deadline of the call that queued the record, however loaded the machine.
        await new Promise((r) => setTimeout(r, 150));
        throwIfCallerGaveUp();
        written.push(...group);
      },
    } as unknown as DeliveryRecordStore;
    const writer = createRecordWriter(store, silent);
    const record: DeliveryRecord = {
      sourceId: "00000000-0000-4000-8000-000000000001",
      receivedAt: new Date(),
      payload: { body: {}, headers: {}, query: {}, truncated: false },
      entry: { outcome: "opened", warnings: [] },
    };
    // A call with a 50 ms deadline queues the record and returns; its group's statement runs after
    // that deadline. (A 1 ms deadline could pass before the call began, on a loaded machine.)
    const call = requestIdServerInterceptor()(async () => {
      writer.write(record);
      return undefined as never;
    });
    await call({ header: new Headers({ "connect-timeout-ms": "50" }), signal: NEVER_ABORTS } as never);
    // The writer's own timer starts the statement (a flush would start it outside any call).
    await new Promise((r) => setTimeout(r, 100));
    await writer.flush();
    expect(written).toEqual([record]);
  });
});

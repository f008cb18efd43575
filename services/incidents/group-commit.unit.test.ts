import { create } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RecordRequestSchema, type RecordRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { groupCommitted } from "./group-commit.js";
import type { RecordBatch } from "./record-many.js";

/**
 * The grouping itself, with Record and the batch path given as plain functions that log what
 * they were asked: when a caller waits, how many deliveries a group takes, and where each
 * caller's answer comes from when the batch decides some, none, or fails.
 */

const context = {} as HandlerContext;
const request = (eventId: string): RecordRequest => create(RecordRequestSchema, { orgSlug: eventId, alert: { eventId } });
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

function harness(decide: (deliveries: RecordRequest[], decided: Map<number, { outcome?: string }>) => Promise<void>, maxGroup?: number, lanes = 1) {
  const alone: string[] = [];
  const groups: string[][] = [];
  const record = async (req: RecordRequest) => {
    alone.push(req.alert!.eventId);
    await tick();
    if (req.alert!.eventId === "bad") throw new Error("refused");
    return { outcome: `alone:${req.alert!.eventId}` };
  };
  const batch: RecordBatch = async (deliveries, decided) => {
    groups.push(deliveries.map((d) => d.alert!.eventId));
    await tick();
    await decide(deliveries, decided);
  };
  return { alone, groups, record: groupCommitted(record, batch, { maxGroup, lanes }) };
}

describe("Record's group commit", () => {
  it("sends a delivery straight to Record when nothing is in flight", async () => {
    const h = harness(async () => {});
    expect(await h.record(request("a"), context)).toEqual({ outcome: "alone:a" });
    expect(await h.record(request("b"), context)).toEqual({ outcome: "alone:b" });
    expect(h.groups).toEqual([]);
  });

  it("sends deliveries straight to Record while a lane is free", async () => {
    const h = harness(async () => {}, undefined, 2);
    const answers = await Promise.all(["a", "b"].map((id) => h.record(request(id), context)));
    expect(answers.map((a) => a.outcome)).toEqual(["alone:a", "alone:b"]);
    expect(h.groups).toEqual([]);
  });

  it("groups what arrives while a statement is in flight, bounded, each caller getting its own answer", async () => {
    const h = harness(async (deliveries, decided) => {
      for (const [i, d] of deliveries.entries()) decided.set(i, { outcome: `batch:${d.alert!.eventId}` });
    }, 3);
    const answers = await Promise.all(["a", "b", "c", "d", "e", "f"].map((id) => h.record(request(id), context)));
    expect(answers.map((a) => a.outcome)).toEqual(["alone:a", "batch:b", "batch:c", "batch:d", "batch:e", "batch:f"]);
    expect(h.groups).toEqual([
      ["b", "c", "d"],
      ["e", "f"],
    ]);
  });

  it("sends what the batch leaves undecided through Record, and a refusal stays with its own caller", async () => {
    const h = harness(async (_deliveries, decided) => {
      decided.set(0, { outcome: "batch:b" });
    });
    const answers = await Promise.allSettled(["a", "b", "bad", "d"].map((id) => h.record(request(id), context)));
    expect(answers.map((a) => (a.status === "fulfilled" ? a.value.outcome : String(a.reason)))).toEqual(["alone:a", "batch:b", "Error: refused", "alone:d"]);
  });

  it("answers what a failed batch committed and sends the rest one by one", async () => {
    const h = harness(async (_deliveries, decided) => {
      decided.set(1, { outcome: "batch:c" });
      throw new Error("batch statement failed");
    });
    const answers = await Promise.all(["a", "b", "c", "d"].map((id) => h.record(request(id), context)));
    expect(answers.map((a) => a.outcome)).toEqual(["alone:a", "alone:b", "batch:c", "alone:d"]);
    expect(h.alone).toEqual(["a", "b", "d"]);
  });
});

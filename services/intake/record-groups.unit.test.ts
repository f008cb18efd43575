import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions, type Client } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  type IncidentsService,
  type RecordManyRequest,
  type RecordRequest,
  RecordManyResponseSchema,
  RecordResponseSchema,
} from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { requestIdServerInterceptor } from "../runtime/http/request-context.js";
import { recordInGroups, type RecordInit } from "./record-groups.js";

/**
 * Record over the bus in groups: what each delivery gets back when it went alone or in a group,
 * against an incident core that answers when the test says so.
 */

const ORG = "9a4d3c56-3f0e-4b6a-9f41-2b1c5d7e8f90";
const delivery = (n: number, data = ""): RecordInit => ({
  orgId: ORG,
  orgSlug: "acme",
  alert: { kind: "alert", source: "metrics-monitor", title: `alert ${n}`, severity: "high", attachIdentity: `a${n}`, eventId: `e${n}`, summary: data },
  retryKey: "",
});

interface Call {
  method: "record" | "recordMany";
  deliveries: RecordRequest[];
  options: CallOptions | undefined;
  answer(respond?: (req: RecordRequest, i: number) => string | undefined): void;
  fail(err: unknown): void;
}

/** An incident core whose every call waits until the test answers it. */
function heldIncidents(): { client: Client<typeof IncidentsService>; calls: Call[] } {
  const calls: Call[] = [];
  const held = (method: Call["method"], deliveries: RecordRequest[], options: CallOptions | undefined) =>
    new Promise<unknown>((resolve, reject) => {
      calls.push({
        method,
        deliveries,
        options,
        fail: reject,
        answer(respond = () => undefined) {
          const results = deliveries.map((d) => create(RecordResponseSchema, { outcome: "opened", reason: d.alert?.title ?? "" }));
          if (method === "record") return resolve(results[0]);
          const errors: Record<number, string> = {};
          deliveries.forEach((d, i) => {
            const error = respond(d, i);
            if (error !== undefined) {
              errors[i] = error;
              results[i] = create(RecordResponseSchema);
            }
          });
          resolve(create(RecordManyResponseSchema, { results, errors }));
        },
      });
    });
  const client = {
    record: (req: RecordRequest, options?: CallOptions) => held("record", [req], options),
    recordMany: (req: RecordManyRequest, options?: CallOptions) => held("recordMany", req.deliveries, options),
  } as unknown as Client<typeof IncidentsService>;
  return { client, calls };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("intake's calls to the incident core, in groups", () => {
  it("sends deliveries alone while a lane is free, and those that arrive while every lane is busy together in one RecordMany", async () => {
    const { client, calls } = heldIncidents();
    const record = recordInGroups(client, { lanes: 2 });
    const answers = Array.from({ length: 7 }, (_, n) => record(delivery(n), `req-${n}`));
    await settle();
    expect(calls.map((c) => c.method)).toEqual(["record", "record"]);
    expect(calls[0]!.options?.headers).toEqual({ "x-request-id": "req-0" });

    calls[0]!.answer();
    await settle();
    expect(calls.map((c) => c.method)).toEqual(["record", "record", "recordMany"]);
    const group = calls[2]!.deliveries;
    expect(group.map((d) => d.alert?.title)).toEqual(["alert 2", "alert 3", "alert 4", "alert 5", "alert 6"]);
    // Each member's request id travels with it.
    expect(group.map((d) => d.requestId)).toEqual(["req-2", "req-3", "req-4", "req-5", "req-6"]);

    calls[1]!.answer();
    calls[2]!.answer();
    expect((await Promise.all(answers)).map((a) => a.reason)).toEqual(Array.from({ length: 7 }, (_, n) => `alert ${n}`));
  });

  it("gives each member of a group its own answer or its own error, with the error's code", async () => {
    const { client, calls } = heldIncidents();
    const record = recordInGroups(client, { lanes: 1 });
    const first = record(delivery(0), "");
    const members = [1, 2, 3].map((n) =>
      record(delivery(n), "").then(
        (a) => a.reason,
        (err: unknown) => ConnectError.from(err),
      ),
    );
    await settle();
    calls[0]!.answer();
    await first;
    await settle();
    calls[1]!.answer((req) => (req.alert?.title === "alert 2" ? new ConnectError("title: too long", Code.InvalidArgument).message : undefined));
    const [one, two, three] = await Promise.all(members);
    expect(one).toBe("alert 1");
    expect(two).toBeInstanceOf(ConnectError);
    expect((two as ConnectError).code).toBe(Code.InvalidArgument);
    expect((two as ConnectError).rawMessage).toBe("title: too long");
    expect(three).toBe("alert 3");
  });

  it("fails every member of a group whose call fails, and the next group is sent all the same", async () => {
    const { client, calls } = heldIncidents();
    const record = recordInGroups(client, { lanes: 1 });
    const first = record(delivery(0), "");
    const failed = [1, 2].map((n) => record(delivery(n), "").catch((err: unknown) => ConnectError.from(err).code));
    await settle();
    calls[0]!.answer();
    await first;
    await settle();
    const later = record(delivery(3), "");
    calls[1]!.fail(new ConnectError("no responders", Code.Unavailable));
    expect(await Promise.all(failed)).toEqual([Code.Unavailable, Code.Unavailable]);
    await settle();
    expect(calls[2]!.deliveries.map((d) => d.alert?.title)).toEqual(["alert 3"]);
    calls[2]!.answer();
    expect((await later).reason).toBe("alert 3");
  });

  it("gives a group the shortest budget of its members, and fails a member whose deadline passed while it waited without sending it", async () => {
    const { client, calls } = heldIncidents();
    const record = recordInGroups(client, { lanes: 1 });
    const first = record(delivery(0), "");
    // Deadlines as a served call's: a member with 40 ms left and one with 10 s left.
    const withDeadline = (n: number, ms: number) =>
      withCallDeadline(ms, () => record(delivery(n), "")).then(
        (a) => a.reason,
        (err: unknown) => ConnectError.from(err).code,
      );
    const short = withDeadline(1, 40);
    const long = withDeadline(2, 10_000);
    const longer = withDeadline(3, 20_000);
    await new Promise((r) => setTimeout(r, 60));
    calls[0]!.answer();
    await first;
    expect(await short).toBe(Code.DeadlineExceeded);
    await settle();
    expect(calls[1]!.deliveries.map((d) => d.alert?.title)).toEqual(["alert 2", "alert 3"]);
    const timeoutMs = calls[1]!.options?.timeoutMs ?? 0;
    expect(timeoutMs).toBeGreaterThan(9_000);
    expect(timeoutMs).toBeLessThanOrEqual(10_000);
    calls[1]!.answer();
    expect(await Promise.all([long, longer])).toEqual(["alert 2", "alert 3"]);
  });

  it("keeps a group within its byte limit: what does not fit goes in the next", async () => {
    const { client, calls } = heldIncidents();
    const record = recordInGroups(client, { lanes: 1, maxBytes: 5_000 });
    const first = record(delivery(0), "");
    const members = [1, 2, 3].map((n) => record(delivery(n, "x".repeat(2_000)), ""));
    await settle();
    calls[0]!.answer();
    await first;
    await settle();
    expect(calls[1]!.deliveries).toHaveLength(2);
    calls[1]!.answer();
    await settle();
    expect(calls[2]!.deliveries).toHaveLength(1);
    calls[2]!.answer();
    expect(await Promise.all(members)).toHaveLength(3);
  });
});

/** Runs `fn` as a call served with `ms` left before its deadline (as intake's handlers run). */
function withCallDeadline<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  const served = requestIdServerInterceptor()(fn as never);
  return served({ header: new Headers({ "connect-timeout-ms": String(ms) }), signal: new AbortController().signal } as never) as Promise<T>;
}

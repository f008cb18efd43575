import { create, isMessage } from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ContractService, EchoRequestSchema, EchoResponseSchema } from "../../../gen/warroom/contract/v1/contract_pb.js";
import { NEVER_ABORTS } from "../http/request-context.js";
import { createMethodRegistry, handlerContext, invokeUnary, signalUntil, type UnaryImplSpec } from "./unary-call.js";

/** Echo's handler, recording the context it was served with; answers a plain object (an init shape). */
function echo(seen: HandlerContext[]): UnaryImplSpec {
  const registry = createMethodRegistry();
  registry.router.service(ContractService, {
    echo(req, context) {
      seen.push(context);
      context.responseHeader.set("x-handler", "yes");
      return { payload: req.payload, headers: { seen: context.requestHeader.get("x-contract-tag") ?? "" } };
    },
    async *echoStream() {},
  });
  return registry.lookup(ContractService.method.echo) as UnaryImplSpec;
}

function context(): HandlerContext {
  return handlerContext({
    method: ContractService.method.echo,
    protocolName: "direct",
    url: "direct:///warroom.contract.v1.ContractService/Echo",
    signal: NEVER_ABORTS,
    deadline: undefined,
    requestHeader: new Headers({ "x-contract-tag": "caller" }),
    values: createContextValues(),
  });
}

describe("invoking a unary handler behind server interceptors", () => {
  it("serves the transport's context itself when no interceptor changed the request, and answers a message", async () => {
    const seen: HandlerContext[] = [];
    const ctx = context();
    const passThrough: Interceptor = (next) => (req) => next(req);
    const output = await invokeUnary(echo(seen), ctx, create(EchoRequestSchema, { payload: new Uint8Array([1, 2]) }), [passThrough]);
    expect(seen[0]).toBe(ctx);
    expect(isMessage(output, EchoResponseSchema)).toBe(true);
    expect(output).toMatchObject({ payload: new Uint8Array([1, 2]), headers: { seen: "caller" } });
    expect(ctx.responseHeader.get("x-handler")).toBe("yes");
  });

  it("serves an interceptor's replacement header, signal and values, and keeps the headers an interceptor answers with", async () => {
    const seen: HandlerContext[] = [];
    const ctx = context();
    const controller = new AbortController();
    const values = createContextValues();
    const replacing: Interceptor = (next) => async (req) => {
      const res = await next({ ...req, header: new Headers({ "x-contract-tag": "interceptor" }), signal: controller.signal, contextValues: values });
      return { ...res, header: new Headers({ "x-replaced": "1" }), trailer: new Headers({ "x-trailer": "2" }) };
    };
    const output = await invokeUnary(echo(seen), ctx, create(EchoRequestSchema), [replacing]);
    expect(seen[0]).not.toBe(ctx);
    expect(seen[0]!.signal).toBe(controller.signal);
    expect(seen[0]!.values).toBe(values);
    expect(output).toMatchObject({ headers: { seen: "interceptor" } });
    expect([...ctx.responseHeader]).toEqual([["x-replaced", "1"]]);
    expect([...ctx.responseTrailer]).toEqual([["x-trailer", "2"]]);
  });
});

describe("a call's deadline signal", () => {
  it("aborts with a TimeoutError at its deadline, and with an AbortError when canceled", async () => {
    const timed = signalUntil(20, undefined);
    await new Promise((resolve) => timed.signal.addEventListener("abort", resolve, { once: true }));
    expect((timed.signal.reason as DOMException).name).toBe("TimeoutError");
    const canceled = signalUntil(60_000, undefined);
    canceled.cancel();
    expect((canceled.signal.reason as DOMException).name).toBe("AbortError");
    canceled.release();
  });

  it("is shared by a call within one whose deadline comes no later, and never by one that ends sooner", () => {
    const outer = signalUntil(60_000, undefined);
    // What is left of the outer budget, as a handler's call inherits it (whole milliseconds).
    const inherited = signalUntil(59_999, outer.signal);
    expect(inherited.signal).toBe(outer.signal);
    const shorter = signalUntil(1_000, outer.signal);
    expect(shorter.signal).not.toBe(outer.signal);
    // A shared signal is the outer call's to cancel and release: the inner call's do nothing to it.
    inherited.cancel();
    inherited.release();
    expect(outer.signal.aborted).toBe(false);
    outer.cancel();
    expect(shorter.signal.aborted).toBe(true);
    expect((shorter.signal.reason as DOMException).name).toBe("AbortError");
    shorter.release();
    outer.release();
  });

  it("links a caller's plain signal rather than sharing it, and unlinks it on release", () => {
    const caller = new AbortController();
    const call = signalUntil(60_000, caller.signal);
    expect(call.signal).not.toBe(caller.signal);
    call.release();
    caller.abort();
    expect(call.signal.aborted).toBe(false);
  });
});

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter, type HandlerContext, type Transport } from "@connectrpc/connect";
import { NEVER_ABORTS, withCallerDeadline } from "../../services/runtime/http/request-context.js";
import { ContractService, EchoRequestSchema, type EchoRequest } from "../../gen/warroom/contract/v1/contract_pb.js";

/** What each handler run saw: its deadline, and when (if ever) its signal aborted. */
export interface HandlerRun {
  payloadBytes: number;
  timeoutMs: number;
  abortedAfterMs?: number;
}

/**
 * The transport contract's probe: echoes, waits, or fails as the request asks. With `next`, a
 * request with `forwardDelayMs` calls Echo again through `next` (as a service calls another) and
 * answers what that inner call saw. `runs` records every handler run.
 */
export function registerContractService(router: ConnectRouter, options: { next?: Transport; runs?: HandlerRun[] } = {}): void {
  const next = options.next ? createClient(ContractService, withCallerDeadline(options.next)) : undefined;
  router.service(ContractService, {
    async echo(req: EchoRequest, context: HandlerContext) {
      if (options.runs) {
        const started = Date.now();
        const run: HandlerRun = { payloadBytes: req.payload.byteLength, timeoutMs: context.timeoutMs() ?? 0 };
        options.runs.push(run);
        if (context.signal !== NEVER_ABORTS) context.signal.addEventListener("abort", () => (run.abortedAfterMs = Date.now() - started), { once: true });
      }
      if (req.forwardDelayMs > 0 && next) {
        // No deadline of its own: the caller's remaining budget must travel with it.
        const inner = await next.echo({ delayMs: req.forwardDelayMs });
        return { innerTimeoutMs: inner.timeoutMs, timeoutMs: context.timeoutMs() ?? 0 };
      }
      if (req.delayMs > 0) {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, req.delayMs);
          context.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            reject(new ConnectError("deadline exceeded", Code.DeadlineExceeded));
          });
        });
      }
      if (req.replyBytes > 0) return { payload: new Uint8Array(req.replyBytes).fill(7) };
      if (req.failCode) {
        throw new ConnectError(req.failMessage || "failed on request", req.failCode as Code, { "x-contract-reason": "asked" }, [
          { desc: EchoRequestSchema, value: create(EchoRequestSchema, { failMessage: "detail" }) },
        ]);
      }
      const headers: Record<string, string> = {};
      context.requestHeader.forEach((value, key) => {
        if (key.startsWith("x-contract-")) headers[key] = value;
      });
      return { payload: req.payload, headers, timeoutMs: context.timeoutMs() ?? 0 };
    },
    async *echoStream(req: EchoRequest) {
      yield { payload: req.payload };
    },
  });
}

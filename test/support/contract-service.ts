import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { ContractService, EchoRequestSchema, type EchoRequest } from "../../gen/warroom/contract/v1/contract_pb.js";

/** The transport contract's probe: echoes, waits, or fails as the request asks. */
export function registerContractService(router: ConnectRouter): void {
  router.service(ContractService, {
    async echo(req: EchoRequest, context: HandlerContext) {
      if (req.delayMs > 0) {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, req.delayMs);
          context.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            reject(new ConnectError("deadline exceeded", Code.DeadlineExceeded));
          });
        });
      }
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

import { Code, ConnectError, type UnaryRequest, type UnaryResponse } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ContractService } from "../../../gen/warroom/contract/v1/contract_pb.js";
import { registry, rpcMetricsInterceptor } from "./metrics.js";

const METHOD = "warroom.contract.v1.ContractService/Echo";

async function count(code: string): Promise<number> {
  const text = await registry.metrics();
  const line = text.split("\n").find((l) => l.startsWith(`warroom_rpc_duration_seconds_count{method="${METHOD}",transport="in-memory",code="${code}"}`));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

describe("the rpc metrics interceptor", () => {
  const req = { service: ContractService, method: ContractService.method.echo } as unknown as UnaryRequest;
  const timed = rpcMetricsInterceptor("in-memory");

  it("counts each call under its code: answered, refused, failed before it began, and thrown as anything else", async () => {
    const before = { ok: await count("ok"), NotFound: await count("NotFound"), Unavailable: await count("Unavailable"), unknown: await count("unknown") };
    await timed(() => Promise.resolve({} as UnaryResponse))(req);
    await timed(() => Promise.resolve({} as UnaryResponse))(req);
    await expect(timed(() => Promise.reject(new ConnectError("no such incident", Code.NotFound)))(req)).rejects.toThrow("no such incident");
    // An interceptor below may throw before it returns a promise (the validation interceptor does).
    await expect(
      timed(() => {
        throw new ConnectError("down", Code.Unavailable);
      })(req),
    ).rejects.toThrow("down");
    await expect(timed(() => Promise.reject(new Error("plain")))(req)).rejects.toThrow("plain");
    expect(await count("ok")).toBe(before.ok + 2);
    expect(await count("NotFound")).toBe(before.NotFound + 1);
    expect(await count("Unavailable")).toBe(before.Unavailable + 1);
    expect(await count("unknown")).toBe(before.unknown + 1);
  });
});

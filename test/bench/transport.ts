import { createClient, type Transport } from "@connectrpc/connect";
import { connect } from "@nats-io/transport-node";
import { ContractService } from "../../gen/warroom/contract/v1/contract_pb.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { createDirectTransport } from "../../services/runtime/transport/direct-transport.js";
import { createMethodRegistry } from "../../services/runtime/transport/unary-call.js";
import { createNatsTransport, serveOverNats } from "../../services/runtime/transport/nats-transport.js";
import { registerContractService } from "../support/contract-service.js";
import { fmt, printTable, summarize } from "./stats.js";

const IN_FLIGHT = 50;

/** As the services connect (nats-connection.ts): no stack captured in advance for each request. */
const connectLikeServices = (natsUrl: string) => connect({ servers: natsUrl, noAsyncTraces: true });

/** The contract service served over NATS from this process, and a transport that calls it there. */
async function echoOverNats(natsUrl: string) {
  const registry = createMethodRegistry();
  registerContractService(registry.router);
  const server = await connectLikeServices(natsUrl);
  serveOverNats(server, registry, { logger: createLogger("silent", "bench") });
  const caller = await connectLikeServices(natsUrl);
  return {
    registry,
    transport: createNatsTransport(caller),
    async close() {
      await caller.close();
      await server.close();
    },
  };
}

/** The cost of one unary call over the one-process (direct) and the NATS transport (10,000 calls each). */
export async function benchTransport(calls = 10_000): Promise<void> {
  const echo = await echoOverNats(process.env.NATS_URL ?? "nats://127.0.0.1:4222");
  const transports: [string, Transport][] = [
    ["direct (one process)", createDirectTransport(echo.registry)],
    ["nats", echo.transport],
  ];
  const payload = new TextEncoder().encode("x".repeat(256));
  const rows = [];
  for (const [name, transport] of transports) {
    const client = createClient(ContractService, transport);
    for (let i = 0; i < 500; i++) await client.echo({ payload }); // warm-up
    const samples: number[] = [];
    const started = performance.now();
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      await client.echo({ payload });
      samples.push(performance.now() - t0);
    }
    const seconds = (performance.now() - started) / 1000;
    const s = summarize(samples);
    rows.push({ transport: name, calls: s.n, median: fmt(s.p50), p99: fmt(s.p99), "calls/s (sequential)": Math.round(s.n / seconds) });
  }
  printTable(`One unary call, 256-byte payload, ${calls} sequential calls`, rows);
  const concurrentRows = [];
  for (const [name, transport] of transports) {
    const run = await callsInFlight(transport, 2 * calls);
    concurrentRows.push({
      transport: name,
      calls: run.calls,
      "calls/s": Math.round(run.callsPerSecond),
      "caller + server CPU per call": `${run.cpuMsPerCall.toFixed(3)} ms`,
    });
  }
  printTable(`The same call, ${IN_FLIGHT} in flight (caller and server share this process; nats-server not counted)`, concurrentRows);
  await echo.close();
}

/** `calls` echo calls of 256 bytes, 50 in flight, through `transport`: their rate and this process's CPU per call. */
async function callsInFlight(transport: Transport, calls: number): Promise<{ calls: number; callsPerSecond: number; cpuMsPerCall: number }> {
  const client = createClient(ContractService, transport);
  const payload = new TextEncoder().encode("x".repeat(256));
  const perWorker = Math.ceil(calls / IN_FLIGHT);
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      for (let i = 0; i < perWorker; i++) await client.echo({ payload });
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const total = perWorker * IN_FLIGHT;
  return { calls: total, callsPerSecond: total / seconds, cpuMsPerCall: (used.user + used.system) / 1000 / total };
}

/**
 * The least CPU one internal call over NATS costs: a 256-byte echo, 50 in flight, caller and
 * server in this process, plus what `natsServerCpuSeconds` says nats-server spent meanwhile.
 */
export async function natsCallCpuMs(natsUrl: string, natsServerCpuSeconds: () => number, calls = 20_000): Promise<number> {
  const echo = await echoOverNats(natsUrl);
  try {
    await callsInFlight(echo.transport, 1_000); // warm-up
    const before = natsServerCpuSeconds();
    const run = await callsInFlight(echo.transport, calls);
    return run.cpuMsPerCall + ((natsServerCpuSeconds() - before) * 1000) / run.calls;
  } finally {
    await echo.close();
  }
}

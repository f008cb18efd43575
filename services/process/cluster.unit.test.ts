import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freePort, listensOn, startCluster } from "./cluster.js";

// A services folder holding one stand-in gateway: it answers /readyz on PORT, and exits 1 when the
// port is taken, as a service does.
const servicesDir = mkdtempSync(join(tmpdir(), "wr-cluster-"));
mkdirSync(join(servicesDir, "gateway"));
writeFileSync(
  join(servicesDir, "gateway", "main.js"),
  `const server = require("node:http").createServer((req, res) => res.end("ready " + process.pid));
server.on("error", () => process.exit(1));
server.listen(Number(process.env.PORT), "127.0.0.1");
process.on("SIGTERM", () => process.exit(0));`,
);
writeFileSync(join(servicesDir, "package.json"), '{"type":"commonjs"}');
afterAll(() => rmSync(servicesDir, { recursive: true, force: true }));

const env = { PATH: process.env.PATH, DATABASE_URL: "postgres://unused", NATS_URL: "nats://unused" };

describe("startCluster", () => {
  it("is ready once each process answers on a port it holds itself", async () => {
    const cluster = await startCluster({ env, port: 0, gateways: 1, intakes: 0, servicesDir });
    try {
      const child = cluster.processes[0]!.child;
      expect(await (await fetch(`${cluster.gatewayUrls[0]}/readyz`)).text()).toBe(`ready ${child.pid}`);
      // The suite runs on Linux (Debian's packages: docs/development.md), whose /proc tells which
      // process holds a port; elsewhere listensOn answers undefined and readiness is the answer alone.
      expect(listensOn(child.pid!, cluster.processes[0]!.port)).toBe(true);
      expect(listensOn(process.pid, cluster.processes[0]!.port)).toBe(false);
    } finally {
      await cluster.stop();
    }
  });

  it("does not take another program answering on a process's port for that process", async () => {
    const port = await freePort();
    const stranger = http.createServer((_req, res) => res.end("ready, but not the gateway"));
    await new Promise<void>((resolve) => stranger.listen(port, "127.0.0.1", resolve));
    try {
      // The gateway cannot bind its port, exits, and is started again on the same one (a gateway's
      // port is its address), until the cluster gives up and says so.
      await expect(startCluster({ env, port, gateways: 1, intakes: 0, servicesDir })).rejects.toThrow(/gateway exited with code 1 while starting, 3 times/);
    } finally {
      stranger.close();
    }
  });

  it("does not wait forever on another program that holds a process's port and never answers", async () => {
    const port = await freePort();
    const silent = net.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(port, "127.0.0.1", resolve));
    try {
      await expect(startCluster({ env, port, gateways: 1, intakes: 0, servicesDir })).rejects.toThrow(/gateway exited with code 1 while starting, 3 times/);
    } finally {
      silent.close();
    }
  }, 30_000);
});

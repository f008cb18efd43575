import { afterAll, beforeAll, describe } from "vitest";
import { metricsMonitorSuite } from "./triggers-metrics-monitor.js";
import { hostileBodiesSuite, maintenanceSuite } from "./triggers-responses.js";
import { cloudAndLogSuite, errorTrackerSuite, remoteSourceSuite } from "./triggers-sources.js";
import { issueCredentials, MODES, startIntakeApp, type SuiteContext } from "./triggers-kit.js";

/**
 * The shared trigger endpoint end to end over HTTP, with the fixtures, in one process and as
 * separate processes over NATS (two gateways, three intake replicas). One app per mode serves
 * every suite, so the cluster starts once.
 */
describe.each(MODES)("POST /triggers (%s)", (mode) => {
  const ctx = {} as SuiteContext;

  beforeAll(async () => {
    ctx.app = await startIntakeApp(mode, { intakes: 3 });
    ctx.creds = await issueCredentials(ctx.app);
  }, 180_000);

  afterAll(async () => {
    await ctx.app?.stop();
  });

  describe("metrics-monitor", () => metricsMonitorSuite(ctx));
  describe("error-tracker", () => errorTrackerSuite(ctx));
  describe("remote-source trigger payload", () => remoteSourceSuite(ctx));
  describe("cloud-monitor and log-analytics", () => cloudAndLogSuite(ctx));
  describe("maintenance windows", () => maintenanceSuite(ctx));
  describe("hostile bodies", () => hostileBodiesSuite(ctx));
});

import { afterAll, beforeAll, describe } from "vitest";
import { pagerDutySuite, pagerDutyV1Suite, type DropinContext } from "./dropin-pagerduty.js";
import { dropinFailureSuite } from "./dropin-failures.js";
import { opsgenieSuite } from "./dropin-opsgenie.js";
import { bootstrapOrg, issueCredentials, MODES, startIntakeApp } from "./triggers-kit.js";

/** The PagerDuty and Opsgenie drop-in receivers over HTTP, in one process and over NATS. */
describe.each(MODES)("drop-in receivers (%s)", (mode) => {
  const ctx = {} as DropinContext;

  beforeAll(async () => {
    ctx.app = await startIntakeApp(mode, { intakes: 2 });
    ctx.creds = await issueCredentials(ctx.app);
    ctx.other = { slug: "globex", ...(await bootstrapOrg(ctx.app, "globex")) };
  }, 180_000);

  afterAll(async () => {
    await ctx.app?.stop();
  });

  describe("PagerDuty Events API v2", () => pagerDutySuite(ctx));
  describe("PagerDuty Events API v1", () => pagerDutyV1Suite(ctx));
  describe("Opsgenie Alert API", () => opsgenieSuite(ctx));
  describe("failures", () => dropinFailureSuite(ctx));
});

import { afterAll, beforeAll, describe } from "vitest";
import { alertRouterSuite } from "./receivers-alert-router.js";
import { chatSuite, type ChatContext } from "./receivers-chat.js";
import { chatFailureSuite, type FailureContext } from "./receivers-failures.js";
import { bootstrapOrg, issueCredentials, MODES, startIntakeApp } from "./triggers-kit.js";

/**
 * The alert-router and chat-message receivers end to end over HTTP, in one process and as
 * separate processes over NATS (two gateways, two intake replicas). One app per mode.
 */
describe.each(MODES)("receivers (%s)", (mode) => {
  const ctx = {} as ChatContext & FailureContext;

  beforeAll(async () => {
    ctx.app = await startIntakeApp(mode, { intakes: 2 });
    ctx.creds = await issueCredentials(ctx.app);
    ctx.other = { slug: "globex", ...(await bootstrapOrg(ctx.app, "globex")) };
    ctx.limited = { slug: "initech", ...(await bootstrapOrg(ctx.app, "initech")) };
  }, 180_000);

  afterAll(async () => {
    await ctx.app?.stop();
  });

  describe("POST /triggers/alertrouter", () => alertRouterSuite(ctx));
  describe("POST /triggers/chat/{org_slug}", () => chatSuite(ctx));
  describe("chat receiver failures", () => chatFailureSuite(ctx));
});

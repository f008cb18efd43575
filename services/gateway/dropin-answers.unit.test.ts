import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { dropinErrorAnswer, dropinSuccessStatus, dropinTooLarge } from "./dropin-answers.js";

// The HTTP tests (test/e2e/dropin-receivers.test.ts) cover every answer a request can reach
// today; no limit on these routes answers ResourceExhausted yet, so 429 is checked here.

const PD = "warroom.intake.v1.IntakeService.EnqueuePagerDutyEvent";
const OG = "warroom.intake.v1.IntakeService.CreateOpsgenieAlert";
const context = { requestId: "req-1", took: 0.004 };

function limited(): ConnectError {
  return new ConnectError("slow down", Code.ResourceExhausted, { "retry-after": "7" });
}

describe("drop-in answer shapes", () => {
  it("429 with Retry-After in PagerDuty's and Opsgenie's words", () => {
    expect(dropinErrorAnswer(PD, limited(), context)).toEqual({
      status: 429,
      body: { status: "throttle event", message: "Requests for this service are arriving too quickly. Please retry later." },
      headers: { "retry-after": "7" },
    });
    expect(dropinErrorAnswer(OG, limited(), context)).toEqual({
      status: 429,
      body: { message: "You are making too many requests! To avoid errors, we recommend you limit requests.", took: 0.004, requestId: "req-1" },
      headers: { "retry-after": "7" },
    });
  });

  it("answers PagerDuty's v1 events 200, as v1 did, and its refusals in the v2 shape", () => {
    const v1 = "warroom.intake.v1.IntakeService.EnqueuePagerDutyV1Event";
    expect(dropinSuccessStatus(v1)).toBe(200);
    expect(dropinSuccessStatus(PD)).toBe(202);
    expect(dropinTooLarge(v1, 512 * 1024, context)).toMatchObject({ status: 400, body: { status: "invalid event" } });
  });

  it("leaves every other route to the common rules", () => {
    expect(dropinErrorAnswer("warroom.intake.v1.IntakeService.Deliver", limited(), context)).toBeUndefined();
    expect(dropinSuccessStatus("warroom.intake.v1.IntakeService.Deliver")).toBeUndefined();
    expect(dropinTooLarge("warroom.intake.v1.IntakeService.Deliver", 1024, context)).toBeUndefined();
  });
});

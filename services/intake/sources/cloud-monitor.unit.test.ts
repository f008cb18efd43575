import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as cloudMonitor from "./cloud-monitor.js";
import { PayloadError } from "./payload-error.js";
import type { AlertInit, MappedDelivery, SubscriptionNoticeDelivery } from "./types.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8")) as Record<string, unknown>;
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

const ALARM_ARN = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-api-5xx-rate";

function alertOf(body: unknown): AlertInit {
  const delivery = cloudMonitor.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

function eventBridge(change: (event: any) => void = () => {}): Record<string, unknown> {
  const event = fixture("aws/eventbridge-cloudwatch-alarm-state-change.json");
  change(event);
  return event;
}

/** The SNS fixture with its `Message` decoded, changed and encoded again. */
function sns(change: (message: any) => void = () => {}): Record<string, unknown> {
  const envelope = fixture("aws/sns-notification-cloudwatch-alarm.json");
  const message = JSON.parse(envelope.Message as string);
  change(message);
  return { ...envelope, Message: JSON.stringify(message) };
}

describe("CloudWatch alarm fixtures", () => {
  it.each([
    ["EventBridge", () => fixture("aws/eventbridge-cloudwatch-alarm-state-change.json")],
    ["SNS", () => fixture("aws/sns-notification-cloudwatch-alarm.json")],
  ])("%s delivery of an ALARM opens on the alarm ARN", (_name, load) => {
    const body = load();
    expect(cloudMonitor.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "cloud-monitor",
      attachIdentity: `cloud-monitor:${ALARM_ARN}`,
      kind: "alert",
      title: "checkout-api-5xx-rate",
      severity: "sev3",
      entity: { kind: "resource", id: "targetgroup/checkout-api/943f017f100becff" },
      alertRef: ALARM_ARN,
      link: "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#alarmsV2:alarm/checkout-api-5xx-rate",
      occurredAt: expect.objectContaining({ seconds: 1718186744n, nanos: 312_000_000 }),
    });
    expect(alert.summary).toContain("5XX responses from the checkout ALB target group above 5/min");
    expect(alert.summary).toContain("Threshold Crossed: 2 out of the last 3 datapoints");
    expect(alert.data).toMatchObject({
      state: "ALARM",
      previousState: "OK",
      metricName: "HTTPCode_Target_5XX_Count",
      namespace: "AWS/ApplicationELB",
      dimensions: { LoadBalancer: "app/checkout-alb/50dc6c495c0c9188", TargetGroup: "targetgroup/checkout-api/943f017f100becff" },
    });
  });

  it("both delivery paths give the same identity and event id, so one state change is recorded once", () => {
    const viaEventBridge = alertOf(eventBridge());
    const viaSns = alertOf(sns());
    expect(viaSns.attachIdentity).toBe(viaEventBridge.attachIdentity);
    expect(viaSns.eventId).toBe(viaEventBridge.eventId);
    expect(viaSns.eventId).not.toBe("");
  });
});

describe("CloudWatch state → kind", () => {
  it.each([
    ["ALARM", "alert"],
    ["OK", "recovery"],
    ["INSUFFICIENT_DATA", "no_data"],
  ])("%s → %s", (state, kind) => {
    const fromEventBridge = alertOf(eventBridge((event) => (event.detail.state.value = state)));
    const fromSns = alertOf(sns((message) => (message.NewStateValue = state)));
    expect(fromEventBridge.kind).toBe(kind);
    expect(fromSns.kind).toBe(kind);
    expect(fromEventBridge.attachIdentity).toBe(`cloud-monitor:${ALARM_ARN}`);
    expect(fromSns.attachIdentity).toBe(`cloud-monitor:${ALARM_ARN}`);
  });

  it("each transition has its own event id", () => {
    const alarm = alertOf(eventBridge());
    const ok = alertOf(
      eventBridge((event) => {
        event.detail.state.value = "OK";
        event.detail.state.timestamp = "2024-06-12T10:25:44.312+0000";
      }),
    );
    expect(ok.eventId).not.toBe(alarm.eventId);
  });

  it.each([
    ["EventBridge", () => eventBridge((event) => (event.detail.state.value = "BROKEN")), "detail.state.value"],
    ["EventBridge without state", () => eventBridge((event) => delete event.detail.state), "detail.state.value"],
    ["SNS", () => sns((message) => (message.NewStateValue = "BROKEN")), "Message.NewStateValue"],
  ])("an unknown state (%s) is refused naming the field", (_name, load, field) => {
    expect(() => cloudMonitor.map(load(), context)).toThrow(PayloadError);
    expect(() => cloudMonitor.map(load(), context)).toThrow(`${field} must be ALARM, OK or INSUFFICIENT_DATA`);
  });
});

describe("CloudWatch alarm identity without an ARN", () => {
  it("EventBridge: built from account, region and alarm name", () => {
    expect(alertOf(eventBridge((event) => (event.resources = []))).attachIdentity).toBe(`cloud-monitor:${ALARM_ARN}`);
  });

  it("SNS: the region comes from the topic ARN, since the message's Region is a display name", () => {
    expect(alertOf(sns((message) => delete message.AlarmArn)).attachIdentity).toBe(`cloud-monitor:${ALARM_ARN}`);
  });

  it("refused when nothing identifies the alarm", () => {
    const body = eventBridge((event) => {
      event.resources = [];
      delete event.account;
    });
    expect(() => cloudMonitor.map(body, context)).toThrow(PayloadError);
  });

  it("without a state-change time the delivery id identifies the notification", () => {
    const alert = alertOf(eventBridge((event) => delete event.detail.state.timestamp));
    expect(alert.eventId).toBe("cloudwatch:eventbridge:c4c1c1c9-6542-e61b-6ef0-8c4d36933a92");
    expect(alert.occurredAt).toBeUndefined();
  });
});

describe("CloudWatch dimensions → entity", () => {
  it.each<[string, Array<{ name: string; value: string }>, { kind: string; id: string } | undefined]>([
    [
      "ECS service",
      [
        { name: "ClusterName", value: "prod" },
        { name: "ServiceName", value: "checkout" },
      ],
      { kind: "service", id: "checkout" },
    ],
    ["EC2 instance", [{ name: "InstanceId", value: "i-0abc" }], { kind: "resource", id: "i-0abc" }],
    [
      "target group beats its load balancer",
      [
        { name: "LoadBalancer", value: "app/lb/1" },
        { name: "TargetGroup", value: "targetgroup/tg/2" },
      ],
      { kind: "resource", id: "targetgroup/tg/2" },
    ],
    ["a lone unknown dimension", [{ name: "Shard", value: "7" }], { kind: "resource", id: "7" }],
    [
      "two unknown dimensions",
      [
        { name: "Shard", value: "7" },
        { name: "Zone", value: "a" },
      ],
      undefined,
    ],
    [
      "one name, several values",
      [
        { name: "InstanceId", value: "i-1" },
        { name: "InstanceId", value: "i-2" },
      ],
      undefined,
    ],
    ["no dimensions", [], undefined],
  ])("%s", (_name, dimensions, entity) => {
    expect(cloudMonitor.dimensionEntity(dimensions)).toEqual(entity);
  });

  it("SNS dimensions and EventBridge dimensions are read alike", () => {
    const viaSns = alertOf(sns((message) => (message.Trigger.Dimensions = [{ name: "FunctionName", value: "charge" }])));
    const viaEventBridge = alertOf(eventBridge((event) => (event.detail.configuration.metrics[0].metricStat.metric.dimensions = { FunctionName: "charge" })));
    expect(viaSns.entity).toEqual({ kind: "resource", id: "charge" });
    expect(viaEventBridge.entity).toEqual({ kind: "resource", id: "charge" });
  });

  it("metric-math alarms list their dimensions per metric", () => {
    const alert = alertOf(
      sns((message) => {
        delete message.Trigger.Dimensions;
        message.Trigger.Metrics = [
          { Id: "m1", MetricStat: { Metric: { Dimensions: [{ name: "QueueName", value: "orders" }] } } },
          { Id: "e1", Expression: "m1 * 2" },
        ];
      }),
    );
    expect(alert.entity).toEqual({ kind: "resource", id: "orders" });
  });
});

describe("SNS envelopes", () => {
  const confirmation = {
    Type: "SubscriptionConfirmation",
    MessageId: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
    Token: "2336412f37fb687f5d51e6e2425",
    TopicArn: "arn:aws:sns:us-east-1:123456789012:ops-alarms",
    Message: "You have chosen to subscribe to the topic arn:aws:sns:us-east-1:123456789012:ops-alarms.",
    SubscribeURL:
      "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-1:123456789012:ops-alarms&Token=2336412f37fb687f5d51e6e2425",
    Timestamp: "2024-06-12T10:00:00.000Z",
    SignatureVersion: "1",
  };

  function notice(body: unknown): SubscriptionNoticeDelivery {
    const delivery: MappedDelivery = cloudMonitor.map(body, context);
    if (delivery.outcome !== "subscription-notice") throw new Error(`expected a subscription notice, got ${JSON.stringify(delivery)}`);
    return delivery;
  }

  it("a SubscriptionConfirmation is its own outcome, with what an operator needs to confirm it", () => {
    expect(cloudMonitor.recognize(confirmation)).toBe(true);
    expect(notice(confirmation)).toEqual({
      outcome: "subscription-notice",
      messageType: "SubscriptionConfirmation",
      topicArn: "arn:aws:sns:us-east-1:123456789012:ops-alarms",
      messageId: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
      token: "2336412f37fb687f5d51e6e2425",
      subscribeUrl: confirmation.SubscribeURL,
      reason: expect.stringContaining("awaits confirmation"),
    });
  });

  it("an UnsubscribeConfirmation is recognized too", () => {
    const body = { ...confirmation, Type: "UnsubscribeConfirmation" };
    expect(cloudMonitor.recognize(body)).toBe(true);
    expect(notice(body)).toMatchObject({ outcome: "subscription-notice", messageType: "UnsubscribeConfirmation" });
  });

  it.each([
    "http://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription",
    "https://attacker.example.com/?Action=ConfirmSubscription",
    "https://sns.us-east-1.amazonaws.com.attacker.example.com/",
    "https://sns.us-east-1.amazonaws.com:8443/",
    "https://user@sns.us-east-1.amazonaws.com/",
    "https://169.254.169.254/latest/meta-data/",
  ])("a SubscribeURL outside the SNS API (%s) is not passed on", (url) => {
    expect(notice({ ...confirmation, SubscribeURL: url }).subscribeUrl).toBeUndefined();
  });

  it.each<[string, Record<string, unknown>]>([
    ["notification of something that is not an alarm", { Type: "Notification", TopicArn: "arn:x", Message: '{"hello":"world"}' }],
    ["notification with a plain-text message", { Type: "Notification", TopicArn: "arn:x", Message: "ALARM: disk" }],
    ["notification with a broken JSON message", { Type: "Notification", TopicArn: "arn:x", Message: '{"AlarmName":' }],
    ["notification whose message is an object", { Type: "Notification", Message: { AlarmName: "a", NewStateValue: "ALARM" } }],
    ["handshake without a topic", { Type: "SubscriptionConfirmation", Token: "t" }],
    ["unknown SNS type", { Type: "Something", TopicArn: "arn:x" }],
  ])("not recognized: %s", (_name, body) => {
    expect(cloudMonitor.recognize(body)).toBe(false);
  });
});

describe("Azure Monitor common-schema alerts with a non-Log signal are cloud-monitor alerts", () => {
  const resolvedMetric = () => fixture("azure/common-schema-metric-alert-resolved.json");
  const firedMetric = () => {
    const body = resolvedMetric() as any;
    body.data.essentials.monitorCondition = "Fired";
    delete body.data.essentials.resolvedDateTime;
    return body as Record<string, unknown>;
  };
  const identity =
    "cloud-monitor:azure:/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/resourcegroups/rg-checkout-prod/providers/microsoft.insights/metricalerts/vm-checkout-high-cpu" +
    "|/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/resourcegroups/rg-checkout-prod/providers/microsoft.compute/virtualmachines/vm-checkout-01" +
    "|vm-checkout-01";

  it("Resolved metric alert (fixture) is a recovery on the rule + target identity", () => {
    const body = resolvedMetric();
    expect(cloudMonitor.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "cloud-monitor",
      attachIdentity: identity,
      eventId: "/subscriptions/6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f/providers/microsoft.alertsmanagement/alerts/9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f:resolved",
      kind: "recovery",
      title: "vm-checkout-high-cpu",
      severity: "sev3",
      entity: { kind: "resource", id: "vm-checkout-01" },
      summary: "CPU above 85% for 5 minutes on checkout VM",
      occurredAt: expect.objectContaining({ seconds: 1718187781n, nanos: 553_301_900 }),
    });
    expect(alert.data).toMatchObject({ signalType: "Metric", customProperties: { team: "payments" } });
  });

  it("the Fired notification of the same alert shares the identity and has its own event id", () => {
    const fired = alertOf(firedMetric());
    expect(fired.kind).toBe("alert");
    expect(fired.attachIdentity).toBe(identity);
    expect(fired.eventId).not.toBe(alertOf(resolvedMetric()).eventId);
    expect(fired.occurredAt).toMatchObject({ seconds: 1718186762n });
  });

  it("resource ids differing only in case are the same identity", () => {
    const body = firedMetric() as any;
    body.data.essentials.alertTargetIDs = [body.data.essentials.alertTargetIDs[0].toUpperCase()];
    expect(alertOf(body).attachIdentity).toBe(identity);
  });

  it("Activity Log alerts are cloud-monitor alerts too", () => {
    const body = firedMetric() as any;
    body.data.essentials.signalType = "Activity Log";
    expect(cloudMonitor.recognize(body)).toBe(true);
  });

  it("Log alerts are not cloud-monitor alerts", () => {
    expect(cloudMonitor.recognize(fixture("azure/common-schema-log-alerts-v2-fired.json"))).toBe(false);
  });

  it.each<[unknown, string]>([
    ["Sev0", "sev1"],
    ["Sev1", "sev2"],
    ["Sev2", "sev3"],
    ["Sev3", "sev4"],
    ["Sev4", "sev4"],
    ["sev0", "sev1"],
    [undefined, "sev3"],
    ["Urgent", "sev3"],
  ])("severity %j → %s", (severity, expected) => {
    const body = firedMetric() as any;
    body.data.essentials.severity = severity;
    expect(alertOf(body).severity).toBe(expected);
  });

  it("a monitorCondition other than Fired or Resolved is refused naming the field", () => {
    const body = firedMetric() as any;
    body.data.essentials.monitorCondition = "Acknowledged";
    expect(() => cloudMonitor.map(body, context)).toThrow("data.essentials.monitorCondition must be Fired or Resolved");
  });
});

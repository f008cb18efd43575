import type { JsonObject } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { isAzureCommonAlert, isLogSignal, mapAzureCommonAlert } from "./azure-common-alert.js";
import { asArray, asText, compactJson, isRecord, looseArray, looseRecord, looseText, ownField } from "./foreign-json.js";
import { toAlertDelivery, type EntityRef } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { encodePathSegment } from "./text-limits.js";
import { canonicalInstant, parseDateTime } from "./timestamps.js";
import type { AlertKind, MapContext, MappedDelivery, SubscriptionNoticeDelivery } from "./types.js";

// Cloud-monitor alerts: AWS CloudWatch alarm state changes, delivered either as an EventBridge
// event ("CloudWatch Alarm State Change") or through SNS (an envelope whose `Message` is the
// alarm as a JSON string), plus the SNS subscription handshake; and Azure Monitor common-schema
// alerts whose signal type is not `Log` (see azure-common-alert.ts).

export const badge = "cloud-monitor" as const;
export const DEFAULT_TITLE = "CloudWatch alarm";

const EVENTBRIDGE_DETAIL_TYPE = "CloudWatch Alarm State Change";
const SNS_HANDSHAKES = new Set(["SubscriptionConfirmation", "UnsubscribeConfirmation"]);
// The alarm JSON inside an SNS envelope is small; a huge `Message` is not an alarm.
const MAX_SNS_MESSAGE_LENGTH = 256 * 1024;

/**
 * Whether the body is a cloud-monitor shape: a CloudWatch alarm through EventBridge or SNS, an SNS
 * handshake, or a non-log Azure common alert.
 */
export function recognize(body: unknown): boolean {
  return isEventBridgeAlarm(body) || isSnsHandshake(body) || snsAlarm(body) !== undefined || (isAzureCommonAlert(body) && !isLogSignal(body));
}

/**
 * A cloud-monitor body as one delivery; an SNS handshake becomes an audit notice, never a fetch.
 */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  if (isEventBridgeAlarm(body)) return mapAlarm(fromEventBridge(body));
  if (isSnsHandshake(body)) return subscriptionNotice(body);
  const alarm = snsAlarm(body);
  if (alarm !== undefined) return mapAlarm(fromSns(body, alarm));
  if (isAzureCommonAlert(body)) return mapAzureCommonAlert(body, badge);
  throw new PayloadError("detail-type", `detail-type must be "${EVENTBRIDGE_DETAIL_TYPE}", or Type an SNS message type`);
}

function isEventBridgeAlarm(body: unknown): boolean {
  return ownField(body, "detail-type") === EVENTBRIDGE_DETAIL_TYPE && isRecord(ownField(body, "detail"));
}

function isSnsHandshake(body: unknown): boolean {
  const type = ownField(body, "Type");
  return typeof type === "string" && SNS_HANDSHAKES.has(type) && asText(ownField(body, "TopicArn")) !== undefined;
}

// Recognition and mapping both need the decoded `Message`; decode it once per body.
const decodedSnsMessages = new WeakMap<object, Record<string, unknown> | null>();

/** The alarm inside an SNS `Notification`, when its `Message` decodes to one. */
function snsAlarm(body: unknown): Record<string, unknown> | undefined {
  if (!isRecord(body) || ownField(body, "Type") !== "Notification") return undefined;
  const cached = decodedSnsMessages.get(body);
  if (cached !== undefined) return cached ?? undefined;
  const message = ownField(body, "Message");
  let decoded: Record<string, unknown> | null = null;
  if (typeof message === "string" && message.length <= MAX_SNS_MESSAGE_LENGTH) {
    try {
      const value: unknown = JSON.parse(message);
      const isAlarm = asText(ownField(value, "AlarmName")) !== undefined && asText(ownField(value, "NewStateValue")) !== undefined;
      decoded = isAlarm && isRecord(value) ? value : null;
    } catch {
      decoded = null;
    }
  }
  decodedSnsMessages.set(body, decoded);
  return decoded ?? undefined;
}

/** One alarm state change, whichever way it was delivered. */
interface AlarmStateChange {
  delivery: "eventbridge" | "sns";
  deliveryId: string | undefined;
  alarmArn: string | undefined;
  alarmName: string | undefined;
  account: string | undefined;
  region: string | undefined;
  state: string | undefined;
  stateField: string;
  previousState: string | undefined;
  reason: string | undefined;
  description: string | undefined;
  changedAt: Timestamp | undefined;
  dimensions: Array<{ name: string; value: string }>;
  metricName: string | undefined;
  namespace: string | undefined;
  topicArn?: string | undefined;
}

const EventBridgeAlarm = z.object({
  id: looseText,
  account: looseText,
  region: looseText,
  resources: looseArray,
  detail: z.object({
    alarmName: looseText,
    state: looseRecord,
    previousState: looseRecord,
    configuration: looseRecord,
  }),
});

function fromEventBridge(body: unknown): AlarmStateChange {
  const parsed = EventBridgeAlarm.safeParse(body);
  if (!parsed.success) throw new PayloadError("detail", "detail must be an object");
  const event = parsed.data;
  const metrics = asArray(ownField(event.detail.configuration, "metrics")) ?? [];
  const metric = ownField(ownField(metrics[0], "metricStat"), "metric");
  return {
    delivery: "eventbridge",
    deliveryId: event.id,
    alarmArn: (event.resources ?? []).map(asText).find((resource) => resource?.startsWith("arn:") && resource.includes(":alarm:")),
    alarmName: event.detail.alarmName,
    account: event.account,
    region: event.region,
    state: asText(ownField(event.detail.state, "value")),
    stateField: "detail.state.value",
    previousState: asText(ownField(event.detail.previousState, "value")),
    reason: asText(ownField(event.detail.state, "reason")),
    description: asText(ownField(event.detail.configuration, "description")),
    changedAt: parseDateTime(ownField(event.detail.state, "timestamp")),
    // Dimensions are an object here ({"LoadBalancer": "app/…"}), unlike the SNS list.
    dimensions: metrics.flatMap((entry) => dimensionsFromObject(ownField(ownField(ownField(entry, "metricStat"), "metric"), "dimensions"))),
    metricName: asText(ownField(metric, "name")),
    namespace: asText(ownField(metric, "namespace")),
  };
}

const SnsAlarmMessage = z.object({
  AlarmName: looseText,
  AlarmArn: looseText,
  AlarmDescription: looseText,
  AWSAccountId: looseText,
  NewStateValue: looseText,
  OldStateValue: looseText,
  NewStateReason: looseText,
  StateChangeTime: looseText,
  Trigger: looseRecord,
});

function fromSns(envelope: unknown, message: Record<string, unknown>): AlarmStateChange {
  const parsed = SnsAlarmMessage.safeParse(message);
  if (!parsed.success) throw new PayloadError("Message", "Message must be a JSON object");
  const alarm = parsed.data;
  const topicArn = asText(ownField(envelope, "TopicArn"));
  const trigger = alarm.Trigger;
  // Metric-math alarms list their metrics instead of naming one.
  const mathMetrics = asArray(ownField(trigger, "Metrics")) ?? [];
  return {
    delivery: "sns",
    deliveryId: asText(ownField(envelope, "MessageId")),
    alarmArn: alarm.AlarmArn,
    alarmName: alarm.AlarmName,
    account: alarm.AWSAccountId,
    // `Region` in the message is a display name ("US East (N. Virginia)"); the ARNs carry the code.
    region: regionOfArn(alarm.AlarmArn) ?? regionOfArn(topicArn),
    state: alarm.NewStateValue,
    stateField: "Message.NewStateValue",
    previousState: alarm.OldStateValue,
    reason: alarm.NewStateReason,
    description: alarm.AlarmDescription,
    changedAt: parseDateTime(alarm.StateChangeTime),
    dimensions: [
      ...dimensionsFromList(ownField(trigger, "Dimensions")),
      ...mathMetrics.flatMap((entry) => dimensionsFromList(ownField(ownField(ownField(entry, "MetricStat"), "Metric"), "Dimensions"))),
    ],
    metricName: asText(ownField(trigger, "MetricName")),
    namespace: asText(ownField(trigger, "Namespace")),
    topicArn,
  };
}

const STATE_KINDS: Readonly<Record<string, AlertKind>> = {
  ALARM: "alert",
  OK: "recovery",
  INSUFFICIENT_DATA: "no_data",
};

function mapAlarm(change: AlarmStateChange): MappedDelivery {
  const state = change.state?.toUpperCase();
  const kind = state !== undefined && Object.hasOwn(STATE_KINDS, state) ? STATE_KINDS[state] : undefined;
  if (state === undefined || kind === undefined) {
    throw new PayloadError(change.stateField, `${change.stateField} must be ALARM, OK or INSUFFICIENT_DATA`);
  }
  const alarmArn = change.alarmArn ?? derivedAlarmArn(change);
  if (alarmArn === undefined) {
    throw new PayloadError("AlarmArn", "the alarm ARN, or the alarm name with its account and region, is required");
  }

  return toAlertDelivery({
    source: badge,
    // The ARN names one alarm in one account and region, whichever way it was delivered, so
    // the EventBridge and SNS paths of the same alarm share an incident.
    attachIdentity: `${badge}:${alarmArn}`,
    // Both paths carry the same state-change time, so one transition delivered twice (or both
    // ways) is recorded once. Without that time the delivery's own id is all there is.
    eventId: change.changedAt
      ? `cloudwatch:${state}:${canonicalInstant(change.changedAt)}`
      : change.deliveryId !== undefined
        ? `cloudwatch:${change.delivery}:${change.deliveryId}`
        : "",
    kind,
    title: change.alarmName ?? DEFAULT_TITLE,
    // Alarms carry no severity of their own: sev3, the default the spec gives every source when
    // the delivery does not say; a person may change it.
    severity: "sev3",
    entity: dimensionEntity(change.dimensions),
    summary: [change.description, change.reason].filter((part) => part !== undefined).join("\n") || undefined,
    link: consoleLink(change.region, change.alarmName),
    alertRef: alarmArn,
    occurredAt: change.changedAt,
    data: compactJson({
      delivery: change.delivery,
      alarmName: change.alarmName,
      account: change.account,
      region: change.region,
      state,
      previousState: change.previousState,
      metricName: change.metricName,
      namespace: change.namespace,
      dimensions: dimensionsJson(change.dimensions),
      topicArn: change.topicArn,
    }),
  });
}

function derivedAlarmArn(change: AlarmStateChange): string | undefined {
  if (change.alarmName === undefined || change.account === undefined || change.region === undefined) return undefined;
  return `arn:aws:cloudwatch:${change.region}:${change.account}:alarm:${change.alarmName}`;
}

// Dimensions that name the affected service outright, then the ones that name one resource, most
// specific first (a target group is narrower than its load balancer).
const SERVICE_DIMENSIONS = ["ServiceName", "Service", "service"];
const RESOURCE_DIMENSIONS = [
  "InstanceId",
  "FunctionName",
  "DBInstanceIdentifier",
  "DBClusterIdentifier",
  "TargetGroup",
  "LoadBalancer",
  "LoadBalancerName",
  "QueueName",
  "TopicName",
  "TableName",
  "BucketName",
  "ClusterName",
  "CacheClusterId",
  "AutoScalingGroupName",
  "ApiName",
  "DistributionId",
  "StreamName",
];

/**
 * CloudWatch dimensions say what the metric is about. A service dimension gives
 * `{kind: "service"}`; otherwise the most specific well-known resource dimension gives
 * `{kind: "resource", id: <value>}`, the same kind Azure resources get; a lone unknown dimension
 * does too. When the chosen dimension has different values across the alarm's metrics, the
 * alarm is about several things and no entity is set.
 */
export function dimensionEntity(dimensions: ReadonlyArray<{ name: string; value: string }>): EntityRef | undefined {
  const valuesOf = (name: string) => [...new Set(dimensions.filter((dimension) => dimension.name === name).map((d) => d.value))];
  for (const name of SERVICE_DIMENSIONS) {
    const values = valuesOf(name);
    if (values.length === 1 && values[0] !== undefined) return { kind: "service", id: values[0] };
  }
  const names = new Set(dimensions.map((dimension) => dimension.name));
  const candidates = [...RESOURCE_DIMENSIONS.filter((name) => names.has(name)), ...(names.size === 1 ? [...names] : [])];
  const chosen = candidates[0];
  if (chosen === undefined) return undefined;
  const values = valuesOf(chosen);
  return values.length === 1 && values[0] !== undefined ? { kind: "resource", id: values[0] } : undefined;
}

function dimensionsFromObject(value: unknown): Array<{ name: string; value: string }> {
  if (!isRecord(value)) return [];
  return Object.entries(value)
    .slice(0, 50)
    .flatMap(([name, dimension]) => (typeof dimension === "string" && dimension !== "" ? [{ name, value: dimension }] : []));
}

function dimensionsFromList(value: unknown): Array<{ name: string; value: string }> {
  return (asArray(value) ?? []).slice(0, 50).flatMap((entry) => {
    const name = asText(ownField(entry, "name"));
    const dimension = asText(ownField(entry, "value"));
    return name !== undefined && dimension !== undefined ? [{ name, value: dimension }] : [];
  });
}

function dimensionsJson(dimensions: ReadonlyArray<{ name: string; value: string }>): JsonObject | undefined {
  if (dimensions.length === 0) return undefined;
  const json: JsonObject = {};
  for (const { name, value } of dimensions) if (name !== "__proto__") json[name] = value;
  return json;
}

const REGION_CODE = /^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$/;

function regionOfArn(arn: string | undefined): string | undefined {
  const region = arn?.split(":")[3];
  return region !== undefined && REGION_CODE.test(region) ? region : undefined;
}

/**
 * The alarm's page in the console of the standard partition. The region becomes part of a host
 * name, so only a well-formed region code is used; China and GovCloud consoles live elsewhere and
 * get no link.
 */
function consoleLink(region: string | undefined, alarmName: string | undefined): string | undefined {
  if (region === undefined || alarmName === undefined || !REGION_CODE.test(region)) return undefined;
  if (region.startsWith("cn-") || region.startsWith("us-gov-")) return undefined;
  return `https://${region}.console.aws.amazon.com/cloudwatch/home?region=${region}#alarmsV2:alarm/${encodePathSegment(alarmName)}`;
}

const SNS_API_HOST = /^sns\.[a-z]{2}(?:-[a-z]+)+-\d{1,2}\.amazonaws\.com(?:\.cn)?$/;

function subscriptionNotice(body: unknown): SubscriptionNoticeDelivery {
  const messageType = ownField(body, "Type") === "UnsubscribeConfirmation" ? "UnsubscribeConfirmation" : "SubscriptionConfirmation";
  const topicArn = asText(ownField(body, "TopicArn")) ?? "";
  const notice: SubscriptionNoticeDelivery = {
    outcome: "subscription-notice",
    messageType,
    topicArn,
    reason:
      messageType === "SubscriptionConfirmation"
        ? `SNS subscription to ${topicArn} awaits confirmation; confirm it with the token (aws sns confirm-subscription)`
        : `SNS subscription to ${topicArn} was removed`,
  };
  const messageId = asText(ownField(body, "MessageId"));
  if (messageId !== undefined) notice.messageId = messageId;
  const token = asText(ownField(body, "Token"));
  if (token !== undefined && token.length <= 1024) notice.token = token;
  const subscribeUrl = asText(ownField(body, "SubscribeURL"));
  if (subscribeUrl !== undefined && isSnsApiUrl(subscribeUrl)) notice.subscribeUrl = subscribeUrl;
  return notice;
}

function isSnsApiUrl(value: string): boolean {
  if (value.length > 4096 || !URL.canParse(value)) return false;
  const url = new URL(value);
  return url.protocol === "https:" && url.port === "" && url.username === "" && SNS_API_HOST.test(url.hostname);
}

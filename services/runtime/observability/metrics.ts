import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

/**
 * The process's Prometheus metrics, served on GET /metrics. One registry per OS process: several
 * services in one process share it, and each series names its service where that matters.
 */
export const registry = new Registry();
collectDefaultMetrics({ register: registry });

const latencyBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export const httpRequests = new Counter({
  name: "warroom_http_requests_total",
  help: "Public HTTP requests by route template, method and status.",
  labelNames: ["route", "method", "status"] as const,
  registers: [registry],
});

export const httpDuration = new Histogram({
  name: "warroom_http_request_duration_seconds",
  help: "Public HTTP request duration by route template.",
  labelNames: ["route"] as const,
  buckets: latencyBuckets,
  registers: [registry],
});

export const deliveriesRefused = new Counter({
  name: "warroom_trigger_deliveries_refused_total",
  help: "Trigger deliveries refused before any work, by route and reason. Slow senders: slow-sender (the client address had DELIVERY_BODY_READS_PER_ADDRESS bodies still arriving), slow-connection (the HTTP/2 connection had DELIVERY_BODY_READS_PER_CONNECTION), reading-full (DELIVERY_BODY_READS over every sender). Memory: memory (the gateway held GATEWAY_DELIVERY_BYTES of read bodies, or the client address its quarter). Load: overload (intake's deliveries in flight were at INTAKE_IN_FLIGHT / INTAKE_MAX_WAITING), share (the organization's share of the process was full past the wait). Budget: large-bodies (the organization's turn for a body over 64 KiB was further away than INTAKE_SHARE_WAIT_MS at INTAKE_LARGE_BODY_BYTES_PER_SECOND).",
  labelNames: ["source", "reason"] as const,
  registers: [registry],
});

export const deliveryBodiesReading = new Gauge({
  name: "warroom_delivery_bodies_reading",
  help: "Deliveries on the public port whose bodies are still arriving (slow senders show here, not in the deliveries in flight).",
  registers: [registry],
});

export const deliveriesInFlight = new Gauge({
  name: "warroom_gateway_deliveries_in_flight",
  help: "Deliveries over REST whose bodies are read and that the gateway is waiting on (the load; bounded by intake's INTAKE_IN_FLIGHT).",
  registers: [registry],
});

export const deliveryBytesHeld = new Gauge({
  name: "warroom_gateway_delivery_bytes_held",
  help: "Bytes of read delivery bodies the gateway holds while their deliveries are handled, against GATEWAY_DELIVERY_BYTES (a quarter of it per client address).",
  registers: [registry],
});

export const recordGroupSize = new Histogram({
  name: "warroom_intake_record_call_deliveries",
  help: "Deliveries per call from intake to the incident core: 1 for a Record, more for a RecordMany carrying the deliveries that arrived while every call in flight was busy (over NATS only).",
  buckets: [1, 2, 5, 10, 20, 50, 100],
  registers: [registry],
});

export const deliveries = new Counter({
  name: "warroom_trigger_deliveries_total",
  help: "Trigger deliveries by source badge and outcome (opened, attached, recorded, ignored, suppressed, refused).",
  labelNames: ["source", "outcome"] as const,
  registers: [registry],
});

export const rpcDuration = new Histogram({
  name: "warroom_rpc_duration_seconds",
  help: "Internal RPC latency seen by the caller, by method, transport and result code.",
  labelNames: ["method", "transport", "code"] as const,
  buckets: latencyBuckets,
  registers: [registry],
});

export const outboxLag = new Gauge({
  name: "warroom_outbox_lag_seconds",
  help: "Age of the oldest unpublished outbox event, by service schema (0 when none waits).",
  labelNames: ["service"] as const,
  registers: [registry],
});

export const outboxPublished = new Counter({
  name: "warroom_outbox_published_total",
  help: "Outbox events published, by service schema.",
  labelNames: ["service"] as const,
  registers: [registry],
});

export const outboxDeadLetters = new Counter({
  name: "warroom_outbox_dead_letters_total",
  help: "Outbox events moved to <schema>.outbox_dead_letters after repeated failed publishes, by service schema.",
  labelNames: ["service"] as const,
  registers: [registry],
});

export const eventDeadLetters = new Counter({
  name: "warroom_event_dead_letters_total",
  help: "Events a durable consumer failed to handle repeatedly, copied to the dead letters, by consumer.",
  labelNames: ["consumer"] as const,
  registers: [registry],
});

export const sweepDuration = new Histogram({
  name: "warroom_heartbeat_sweep_duration_seconds",
  help: "Duration of one heartbeat silence sweep.",
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

export const sweepsTotal = new Counter({
  name: "warroom_heartbeat_sweeps_total",
  help: "Heartbeat silence sweeps by result (ok, failed).",
  labelNames: ["result"] as const,
  registers: [registry],
});

export const sweepLastSuccess = new Gauge({
  name: "warroom_heartbeat_sweep_last_success_timestamp_seconds",
  help: "Unix time at which this process last finished a heartbeat sweep without error.",
  registers: [registry],
});

export const sweepInterval = new Gauge({
  name: "warroom_heartbeat_sweep_interval_seconds",
  help: "The configured time between heartbeat sweeps (HEARTBEAT_SWEEP_SECONDS).",
  registers: [registry],
});

export const natsConnected = new Gauge({
  name: "warroom_nats_connected",
  help: "1 while the process's NATS connection (named after the process) is up, 0 while it is down or reconnecting; absent in one-process mode.",
  labelNames: ["connection"] as const,
  registers: [registry],
});

export const dbPoolConnections = new Gauge({
  name: "warroom_db_pool_connections",
  help: "Database pool connections by state: busy (serving queries or a transaction), idle, connecting, and max (the pool size).",
  labelNames: ["state"] as const,
  registers: [registry],
});

export const dbPoolWaiting = new Gauge({
  name: "warroom_db_pool_waiting_queries",
  help: "Queries waiting for a database connection because every pooled connection is busy.",
  registers: [registry],
});

export const chatWebhookRequests = new Counter({
  name: "warroom_chat_webhook_requests_total",
  help: "Calls to chat webhooks by result: ok, http_error (non-2xx or throttled), timeout, network, tls, refused (egress policy), error.",
  labelNames: ["result"] as const,
  registers: [registry],
});

export const chatWebhookDuration = new Histogram({
  name: "warroom_chat_webhook_request_duration_seconds",
  help: "Duration of calls to chat webhooks, whatever their result.",
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

export const customSourceRecordsDropped = new Counter({
  name: "warroom_custom_source_records_dropped_total",
  help: "Custom-source kept payloads and delivery-log rows dropped unwritten because Postgres did not keep up (the deliveries themselves were recorded).",
  registers: [registry],
});

export const subscriptionAttempts = new Counter({
  name: "warroom_subscription_attempts_total",
  help: "Event subscription delivery attempts by outcome: delivered, failed (non-2xx, timeout, connection error), simulated (egress off), gone (410).",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

export const subscriptionAttemptDuration = new Histogram({
  name: "warroom_subscription_attempt_duration_seconds",
  help: "Duration of event subscription delivery attempts, whatever their result.",
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

export const subscriptionDeliveriesGivenUp = new Counter({
  name: "warroom_subscription_deliveries_failed_total",
  help: "Event subscription deliveries given up after the retry schedule (24 h) or a 410.",
  registers: [registry],
});

export const subscriptionDeliveriesWaiting = new Gauge({
  name: "warroom_subscription_deliveries_waiting",
  help: "Event subscription deliveries not yet settled (due, in flight, or waiting for a retry), counted up to 1,000,000. Read from the database at each scrape.",
  registers: [registry],
});

export const subscriptionBacklog = new Gauge({
  name: "warroom_subscription_backlog_seconds",
  help: "How long the longest-due delivery of an enabled subscription has been due without being sent; 0 when none is due. Read from the database at each scrape.",
  registers: [registry],
});

export const investigationsWaiting = new Gauge({
  name: "warroom_investigations_waiting",
  help: "Investigations not yet done (waiting or running). Read from the database at each scrape.",
  registers: [registry],
});

export const investigationBacklog = new Gauge({
  name: "warroom_investigation_backlog_seconds",
  help: "Age of the oldest investigation not yet done; 0 when none waits. Read from the database at each scrape.",
  registers: [registry],
});

export const subscriptionsDisabled = new Counter({
  name: "warroom_subscriptions_disabled_total",
  help: "Subscriptions disabled by the service, by reason: gone (410) or failing (failed for SUBSCRIPTION_DISABLE_AFTER_SECONDS).",
  labelNames: ["reason"] as const,
  registers: [registry],
});

function observeCall(method: string, transport: string, code: string, started: number): void {
  rpcDuration.observe({ method, transport, code }, (performance.now() - started) / 1000);
}

function codeOf(err: unknown): string {
  return err instanceof ConnectError ? (Code[err.code] ?? "unknown") : "unknown";
}

/** Times every call a transport makes. */
export function rpcMetricsInterceptor(transport: "nats" | "in-memory"): Interceptor {
  // Chained with then rather than awaited, as errorInterceptor is (errors.ts).
  return (next) => (req) => {
    const started = performance.now();
    const method = `${req.service.typeName}/${req.method.name}`;
    let answer: ReturnType<typeof next>;
    try {
      answer = next(req);
    } catch (err) {
      observeCall(method, transport, codeOf(err), started);
      return Promise.reject(err);
    }
    return answer.then(
      (res) => {
        observeCall(method, transport, "ok", started);
        return res;
      },
      (err: unknown) => {
        observeCall(method, transport, codeOf(err), started);
        throw err;
      },
    );
  };
}

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { UnprocessableSchema } from "../../gen/warroom/errors/v1/errors_pb.js";
import { IdentityService, type Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService, type RecordRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { createInProcessBroadcast } from "../runtime/transport/broadcast.js";
import { createClients } from "../runtime/transport/clients.js";
import { errorInterceptor } from "../runtime/errors.js";
import { createLogger } from "../runtime/observability/logger.js";
import { CHAT_CALLS_PER_MINUTE } from "./chat-receiver.js";
import { RECEIVER_FAILURES_PER_MINUTE } from "./receiver-secrets.js";
import { createIntakeRoutes } from "./routes.js";
import type { IntakeStore, OpsgenieRequestRow, RetryKeyRow } from "./store.js";

/**
 * Intake's handlers against stub peers: identity, the incident core and remote sources are fakes
 * served through Connect's router transport, intake's tables an in-memory store. No database, no
 * NATS; the Postgres store and the real peers are covered by the e2e suites.
 */

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const fixture = (name: string) => readFileSync(join(repoRoot, "test/fixtures", name));
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

const ORG: Organization = { $typeName: "warroom.identity.v1.Organization", id: "0b6a3e2c-1f4d-4c8e-9a7b-2d5e6f708192", slug: "acme" };
const INGEST_TOKEN = "ingest-token-of-acme";
const CHAT_SECRET = "chat-secret-of-acme";
const INCIDENT_ID = "5f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f";

/** The chat window's seconds left, as the fake reports them. */
const SECONDS_LEFT_IN_MINUTE = 42;

/** Intake's tables within one minute of the database clock. */
function createMemoryStore() {
  const retryKeys = new Map<string, RetryKeyRow>();
  const chatCalls = new Map<string, number>();
  const failures = new Map<string, number>();
  const opsgenie = new Map<string, OpsgenieRequestRow & { orgId: string; attachIdentity: string | null }>();
  const audits: { orgId: string; kind: string; data: JsonObject }[] = [];
  let tokens = 0;
  const store: IntakeStore = {
    retryKeys: {
      async claim(orgId, key, _times, bodyDigest) {
        if (retryKeys.has(`${orgId}/${key}`)) return undefined;
        const token = `token-${++tokens}`;
        retryKeys.set(`${orgId}/${key}`, { token, state: "working", answer: null, body_digest: bodyDigest ?? null });
        return token;
      },
      async answer(orgId, key, token, answer) {
        const row = retryKeys.get(`${orgId}/${key}`);
        if (row?.token === token) retryKeys.set(`${orgId}/${key}`, { ...row, state: "answered", answer });
      },
      async release(orgId, key, token) {
        if (retryKeys.get(`${orgId}/${key}`)?.token === token) retryKeys.delete(`${orgId}/${key}`);
      },
      async held(orgId, key) {
        return retryKeys.get(`${orgId}/${key}`);
      },
      async forgetExpired() {
        return 0;
      },
    },
    chatWindows: {
      async countCall(orgSlug) {
        const calls = (chatCalls.get(orgSlug) ?? 0) + 1;
        chatCalls.set(orgSlug, calls);
        return { calls, retry_after: SECONDS_LEFT_IN_MINUTE };
      },
    },
    receiverFailures: {
      async add(scope, clientAddress) {
        const count = (failures.get(`${scope}/${clientAddress}`) ?? 0) + 1;
        failures.set(`${scope}/${clientAddress}`, count);
        return { failures: count, retry_after: SECONDS_LEFT_IN_MINUTE };
      },
    },
    opsgenieRequests: {
      async begin({ requestId, orgId, action, alias }) {
        opsgenie.set(requestId, {
          orgId,
          action,
          alias,
          state: "processing",
          outcome: null,
          is_success: null,
          status: null,
          alert_id: null,
          processed_at: null,
          attachIdentity: null,
        });
      },
      async finish(requestId, result) {
        const row = opsgenie.get(requestId)!;
        Object.assign(row, {
          state: "processed",
          outcome: result.outcome,
          is_success: result.isSuccess,
          status: result.status,
          alert_id: result.alertId,
          attachIdentity: result.attachIdentity,
          processed_at: new Date(),
        });
      },
      async attachIdentityOf(orgId, alertId) {
        const rows = [...opsgenie.values()].filter((row) => row.orgId === orgId && row.alert_id === alertId && row.attachIdentity !== null);
        return rows.at(-1)?.attachIdentity ?? undefined;
      },
      async find(orgId, requestId) {
        const row = opsgenie.get(requestId);
        return row?.orgId === orgId ? row : undefined;
      },
    },
    async audit(orgId, kind, data) {
      audits.push({ orgId, kind, data });
    },
  };
  return { store, chatCalls, audits };
}

type RecordImpl = ServiceImpl<typeof IncidentsService>["record"];

/** How the stub peers answer; each test sets what it needs. */
interface Peers {
  record: RecordImpl;
  identityFailure?: Code;
  connectionFailure?: Code;
  openPagerDutyIncident?: boolean;
}

function unauthenticated(): ConnectError {
  return new ConnectError("Invalid trigger ingest token", Code.Unauthenticated);
}

const openedIncident: RecordImpl = (req) => ({
  outcome: "opened",
  incident: {
    id: INCIDENT_ID,
    entity: { kind: req.alert?.entity?.kind ?? "service", id: req.alert?.entity?.id ?? "checkout" },
    severity: req.alert?.severity ?? "sev3",
    workspaceUrl: `https://warroom.example/o/${req.orgSlug}/incidents/${INCIDENT_ID}`,
  },
});

function startIntake() {
  const memory = createMemoryStore();
  const recorded: RecordRequest[] = [];
  const peers: Peers = { record: openedIncident };

  const peerTransport = createRouterTransport((router) => {
    router.service(IdentityService, {
      resolveIngestToken(_req, context) {
        if (peers.identityFailure !== undefined) throw new ConnectError("identity is down", peers.identityFailure);
        if (context.requestHeader.get("authorization") !== `Bearer ${INGEST_TOKEN}`) throw unauthenticated();
        return ORG;
      },
      resolveReceiverSecret(req, context) {
        const secret = context.requestHeader.get(`x-service-${req.kind}-secret`);
        if (req.kind !== "chat" || req.orgSlug !== ORG.slug || secret !== CHAT_SECRET) throw new ConnectError("bad secret", Code.Unauthenticated);
        return ORG;
      },
    });
    router.service(IncidentsService, {
      record(req: RecordRequest, context: HandlerContext) {
        recorded.push(req);
        return peers.record(req, context);
      },
      incidentState: () => ({ state: "open" }),
      findLatestOpen: () => (peers.openPagerDutyIncident ? { incidentId: INCIDENT_ID, attachIdentity: "pagerduty-events:dedup:1" } : {}),
    });
    router.service(RemoteSourcesService, {
      resolveConnection(req) {
        if (peers.connectionFailure !== undefined) throw new ConnectError("no such connection", peers.connectionFailure);
        return { id: req.connectionId };
      },
    });
  });

  const logger = createLogger("silent", "intake-unit-test");
  const routes = createIntakeRoutes({ clients: createClients(peerTransport), store: memory.store, logger, broadcast: createInProcessBroadcast() });
  const intakeTransport = createRouterTransport((router) => router.service(IntakeService, routes), { router: { interceptors: [errorInterceptor(logger)] } });
  return { intake: createClient(IntakeService, intakeTransport), peers, recorded, ...memory };
}

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to be refused");
}

const withToken = (token = INGEST_TOKEN) => ({ headers: { authorization: `Bearer ${token}` } });
const triggered = () => ({ body: fixture("datadog/custom-body-triggered.json"), contentType: "application/json" });

describe("the shared trigger endpoint", () => {
  let app: ReturnType<typeof startIntake>;
  beforeEach(() => {
    app = startIntake();
  });

  it("refuses a call without an ingest token, before anything is recorded", async () => {
    const err = await refusal(app.intake.deliver(triggered()));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(err.rawMessage).toBe("Missing trigger ingest token");
    expect(app.recorded).toEqual([]);
  });

  it("refuses a token identity does not know", async () => {
    const err = await refusal(app.intake.deliver(triggered(), withToken("someone-elses-token")));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(err.rawMessage).toBe("Invalid trigger ingest token");
    expect(app.recorded).toEqual([]);
  });

  it("answers 503 while identity cannot say whose token it is", async () => {
    app.peers.identityFailure = Code.Unavailable;
    const err = await refusal(app.intake.deliver(triggered(), withToken()));
    expect(err.code).toBe(Code.Unavailable);
    expect(app.recorded).toEqual([]);
  });

  it("hands a recognized payload to the incident core as the mapped alert, and passes its answer through", async () => {
    const answer = await app.intake.deliver(triggered(), withToken());
    expect(app.recorded).toHaveLength(1);
    const [request] = app.recorded;
    expect(request).toMatchObject({ orgId: ORG.id, orgSlug: ORG.slug });
    expect(request!.alert).toMatchObject({
      source: "metrics-monitor",
      kind: "alert",
      attachIdentity: "metrics-monitor:alert:81234567",
      eventId: "7612983743229480395",
      severity: "sev2",
      alertRef: "81234567",
    });
    expect(answer).toMatchObject({
      outcome: "opened",
      incidentId: INCIDENT_ID,
      proposedSeverity: "sev2",
      workspaceUrl: `https://warroom.example/o/acme/incidents/${INCIDENT_ID}`,
    });
    expect(answer.reason).toBeUndefined();
  });

  it("says why a suppressed delivery was not acted on", async () => {
    app.peers.record = () => ({ outcome: "suppressed" });
    const answer = await app.intake.deliver(triggered(), withToken());
    expect(answer).toMatchObject({ outcome: "suppressed", proposedSeverity: "sev2", reason: "an active maintenance window covers this delivery" });
    expect(answer.incidentId).toBeUndefined();
  });

  it.each([Code.Unavailable, Code.DeadlineExceeded, Code.Internal])(
    "answers the 503 'unavailable' the gateway maps when the incident core fails with code %s",
    async (code) => {
      app.peers.record = () => {
        throw new ConnectError("the incident core failed", code);
      };
      const err = await refusal(app.intake.deliver(triggered(), withToken()));
      expect(err.code).toBe(Code.Unavailable);
      expect(err.rawMessage).toBe("unavailable");
    },
  );

  it("passes the incident core's refusal of the alert on as it is", async () => {
    app.peers.record = () => {
      throw new ConnectError("summary is too long", Code.InvalidArgument);
    };
    const err = await refusal(app.intake.deliver(triggered(), withToken()));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe("summary is too long");
  });

  it("refuses an unrecognized payload as unprocessable (422), recording nothing", async () => {
    const err = await refusal(app.intake.deliver({ body: json({ hello: "world" }), contentType: "application/json" }, withToken()));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe("Unrecognized trigger payload");
    expect(err.findDetails(UnprocessableSchema)).toHaveLength(1);
    expect(app.recorded).toEqual([]);
  });

  it("refuses a body that is not JSON as unprocessable, saying so", async () => {
    const err = await refusal(app.intake.deliver({ body: new TextEncoder().encode("{"), contentType: "application/json" }, withToken()));
    expect(err.findDetails(UnprocessableSchema)).toMatchObject([{ details: "the body is not valid JSON" }]);
  });

  it("refuses a remote-source delivery whose connection the remote-source service does not find", async () => {
    app.peers.connectionFailure = Code.NotFound;
    const body = json({ serviceSource: "remote", connectionId: "conn-1", title: "Queue backlog", severity: "sev2", dedupKey: "q-1" });
    const err = await refusal(app.intake.deliver({ body, contentType: "application/json" }, withToken()));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.findDetails(UnprocessableSchema)).toHaveLength(1);
    expect(err.rawMessage).toBe('connectionId "conn-1" is not a remote source of this organization');
    expect(app.recorded).toEqual([]);
  });

  it("answers 503 when the remote-source service cannot be asked", async () => {
    app.peers.connectionFailure = Code.DeadlineExceeded;
    const body = json({ serviceSource: "remote", connectionId: "conn-1", title: "Queue backlog", severity: "sev2", dedupKey: "q-1" });
    const err = await refusal(app.intake.deliver({ body, contentType: "application/json" }, withToken()));
    expect(err.code).toBe(Code.Unavailable);
  });

  it("answers a retry with an Idempotency-Key from the first delivery, recording once", async () => {
    const headers = { authorization: `Bearer ${INGEST_TOKEN}`, "idempotency-key": "retry-1" };
    const first = await app.intake.deliver(triggered(), { headers });
    const retry = await app.intake.deliver(triggered(), { headers });
    expect(retry).toEqual(first);
    expect(app.recorded).toHaveLength(1);
  });

  it("lets a retry do the work again when the first delivery failed", async () => {
    const headers = { authorization: `Bearer ${INGEST_TOKEN}`, "idempotency-key": "retry-2" };
    app.peers.record = () => {
      throw new ConnectError("down", Code.Unavailable);
    };
    await refusal(app.intake.deliver(triggered(), { headers }));
    app.peers.record = openedIncident;
    const retry = await app.intake.deliver(triggered(), { headers });
    expect(retry.outcome).toBe("opened");
    expect(app.recorded).toHaveLength(2);
  });
});

describe("the chat receiver", () => {
  let app: ReturnType<typeof startIntake>;
  beforeEach(() => {
    app = startIntake();
  });

  const chat = (text: string, secret = CHAT_SECRET, address = "203.0.113.7") =>
    app.intake.deliverChat(
      { orgSlug: ORG.slug, body: json({ channel_id: "C-ops", message_id: text, text }), contentType: "application/json" },
      { headers: { "x-service-chat-secret": secret, "x-forwarded-for": address } },
    );

  it(`answers 429 with Retry-After past ${CHAT_CALLS_PER_MINUTE} calls a minute`, async () => {
    for (let i = 0; i < CHAT_CALLS_PER_MINUTE; i++) expect((await chat(`call ${i}`)).outcome).toBe("opened");
    const err = await refusal(chat("one too many"));
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.rawMessage).toBe(`more than ${CHAT_CALLS_PER_MINUTE} calls a minute to this route`);
    expect(err.metadata.get("retry-after")).toBe(String(SECONDS_LEFT_IN_MINUTE));
    expect(app.recorded).toHaveLength(CHAT_CALLS_PER_MINUTE);
  });

  it("does not spend the route's budget on a call with a wrong secret", async () => {
    const err = await refusal(chat("guess", "not-the-secret"));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(app.chatCalls.get(ORG.slug)).toBeUndefined();
  });

  it(`answers 429 to an address past ${RECEIVER_FAILURES_PER_MINUTE} failed secrets, and still lets the right secret through from it`, async () => {
    for (let i = 0; i < RECEIVER_FAILURES_PER_MINUTE; i++) expect((await refusal(chat(`guess-${i}`, "guess"))).code).toBe(Code.Unauthenticated);
    const err = await refusal(chat("one guess too many", "guess"));
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.metadata.get("retry-after")).toBe(String(SECONDS_LEFT_IN_MINUTE));
    // The right secret from the same address (a shared vendor range) is checked first, and gets through.
    expect((await chat("right secret, same address")).outcome).toBe("opened");
    // So does another address with the secret.
    expect((await chat("from elsewhere", CHAT_SECRET, "198.51.100.9")).outcome).toBe("opened");
  });

  it("ignores a message without a channel, recording nothing", async () => {
    const answer = await app.intake.deliverChat(
      { orgSlug: ORG.slug, body: json({ text: "hello" }), contentType: "application/json" },
      { headers: { "x-service-chat-secret": CHAT_SECRET } },
    );
    expect(answer).toMatchObject({ outcome: "ignored", reason: "channel_id is missing" });
    expect(app.recorded).toEqual([]);
  });
});

describe("the alert-router receiver", () => {
  it("refuses a call without its secret, before reading the body", async () => {
    const app = startIntake();
    const err = await refusal(app.intake.deliverAlertRouter({ body: fixture("alertmanager/webhook-v4-firing.json"), contentType: "application/json" }));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(app.recorded).toEqual([]);
  });
});

describe("the drop-in receivers", () => {
  it("keeps a PagerDuty change event in the audit log when no incident of the source is open", async () => {
    const app = startIntake();
    const body = json({ routing_key: INGEST_TOKEN, payload: { summary: "Deployed v2", source: "ci", timestamp: "2024-06-12T10:00:00Z" } });
    const answer = await app.intake.enqueuePagerDutyChange({ body, contentType: "application/json" });
    expect(answer).toMatchObject({ status: "success", message: "Change event processed" });
    expect(app.recorded).toEqual([]);
    expect(app.audits).toMatchObject([{ orgId: ORG.id, kind: "trigger.pagerduty_change", data: { summary: "Deployed v2" } }]);
  });

  it("records a PagerDuty change event on the open incident of the source", async () => {
    const app = startIntake();
    app.peers.openPagerDutyIncident = true;
    app.peers.record = () => ({ outcome: "recorded", incident: { id: INCIDENT_ID } });
    const body = json({ routing_key: INGEST_TOKEN, payload: { summary: "Deployed v2", source: "ci", timestamp: "2024-06-12T10:00:00Z" } });
    await app.intake.enqueuePagerDutyChange({ body, contentType: "application/json" });
    expect(app.recorded[0]?.alert).toMatchObject({ attachIdentity: "pagerduty-events:dedup:1", summary: "Deployed v2" });
    expect(app.audits).toEqual([]);
  });

  it("stores an Opsgenie request's status, read back by its id", async () => {
    const app = startIntake();
    const headers = { authorization: `GenieKey ${INGEST_TOKEN}` };
    const accepted = await app.intake.createOpsgenieAlert(
      { body: json({ message: "Disk full", alias: "disk-1" }), contentType: "application/json" },
      { headers },
    );
    expect(accepted.result).toBe("Request will be processed");
    const status = await app.intake.getOpsgenieRequestStatus({ requestId: accepted.requestId }, { headers });
    expect(status.data).toMatchObject({
      success: true,
      action: "Create",
      isSuccess: true,
      status: "Created alert",
      alertId: INCIDENT_ID,
      alias: "disk-1",
      outcome: "opened",
    });
  });

  it("answers 503 to an Opsgenie create when the incident core is unavailable", async () => {
    const app = startIntake();
    app.peers.record = () => {
      throw new ConnectError("down", Code.Unavailable);
    };
    const err = await refusal(
      app.intake.createOpsgenieAlert(
        { body: json({ message: "Disk full" }), contentType: "application/json" },
        { headers: { authorization: `GenieKey ${INGEST_TOKEN}` } },
      ),
    );
    expect(err.code).toBe(Code.Unavailable);
  });
});

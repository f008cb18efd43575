import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import { IncidentOpenedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { type AppendTimelineRequest, IncidentSchema, TimelineEntrySchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { failWith, serveUnderTest, STUB_TOKEN, stubPeers, stubPrincipal, type StubPeers, codeOf } from "../../test/support/stub-peers.js";
import { EgressError, type EgressClient, type EgressRequest, type EgressResponse } from "../runtime/egress/index.js";
import { createLogger } from "../runtime/observability/logger.js";
import { createSecretBox } from "../runtime/credentials/secret-box.js";
import { AUDIT_KINDS, type CommsDeps } from "./deps.js";
import { createCommsRoutes } from "./routes.js";
import { createMemoryCommsStore, type MemoryCommsStore } from "./testing/memory-store.js";
import { recordPendingTimelineEntries } from "./timeline.js";
import { offerWarRoomLink } from "./war-room-link.js";

/**
 * The comms routes over an in-memory store, stub peers and a stand-in for the chat webhook: what
 * a send does when the incident core is missing the incident or does not answer, and every way a
 * webhook call can fail. The Postgres store is covered by the end-to-end suite.
 */

const ORG = stubPrincipal().orgSlug;
const ORG_ID = stubPrincipal().orgId;
const INCIDENT = "5f0c1a3e-8d7b-4c2a-9e1f-0a1b2c3d4e5f";
const WEBHOOK = "https://chat.example/webhook/secret-path";
const auth = { headers: { authorization: `Bearer ${STUB_TOKEN}` } };
/** A peer that is down, and one too slow to answer in time. */
const PEER_FAILURES: [string, Code][] = [
  ["Unavailable", Code.Unavailable],
  ["DeadlineExceeded", Code.DeadlineExceeded],
];

/** The chat webhook: answers what `answer` gives, and keeps what it was sent. */
interface FakeWebhook extends EgressClient {
  posts: EgressRequest[];
  answer: () => Promise<EgressResponse>;
  vetAnswer: () => Promise<void>;
}

function fakeWebhook(): FakeWebhook {
  const webhook: FakeWebhook = {
    posts: [],
    answer: async () => ({ status: 202, headers: {}, body: Buffer.alloc(0), truncated: false }),
    vetAnswer: async () => {},
    async vet(url) {
      await webhook.vetAnswer();
      const parsed = new URL(url);
      return { url: parsed, hostname: parsed.hostname, port: 443, address: "203.0.113.7", family: 4, addresses: ["203.0.113.7"] };
    },
    async request(request) {
      webhook.posts.push(request);
      return webhook.answer();
    },
    pooledConnections: () => 0,
    close: () => undefined,
  };
  return webhook;
}

const answerWith =
  (status: number, body = "") =>
  async (): Promise<EgressResponse> => ({ status, headers: {}, body: Buffer.from(body), truncated: false });

interface Harness {
  store: MemoryCommsStore;
  peers: StubPeers;
  webhook: FakeWebhook;
  deps: CommsDeps;
  client: Client<typeof CommsService>;
  timeline: AppendTimelineRequest[];
}

function harness(): Harness {
  const store = createMemoryCommsStore();
  const peers = stubPeers();
  const webhook = fakeWebhook();
  const timeline: AppendTimelineRequest[] = [];
  peers.incidents.getIncident = (req) =>
    create(IncidentSchema, {
      id: req.id,
      title: "Checkout is down",
      severity: "sev1",
      state: "open",
      workspaceUrl: `https://warroom.example/o/${ORG}/incidents/${req.id}`,
    });
  peers.incidents.appendTimeline = (req) => {
    timeline.push(req);
    return create(TimelineEntrySchema, { kind: req.entry?.kind ?? "" });
  };
  peers.identity.getOrganization = () => ({ id: ORG_ID, slug: ORG });
  const secretBox = createSecretBox([{ id: "k1", key: randomBytes(32) }]);
  const deps: CommsDeps = {
    clients: peers.clients,
    logger: createLogger("silent", "comms-unit"),
    config: { publicUrl: "https://warroom.example", CHAT_WEBHOOK_TIMEOUT_SECONDS: 5 },
    store,
    outbox: { poke: () => {} },
    egress: webhook,
    secretBox: () => secretBox,
  };
  const client = createClient(
    CommsService,
    serveUnderTest((router) => router.service(CommsService, createCommsRoutes(deps))),
  );
  return { store, peers, webhook, deps, client, timeline };
}

async function errorOf(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("the call succeeded");
}

/** A draft, approved: ready to send. */
async function approvedMessage(h: Harness, body = "We are rolling back the deploy."): Promise<string> {
  const drafted = await h.client.draftMessage({ org: ORG, incidentId: INCIDENT, channel: "chatwebhook", body }, auth);
  await h.client.approveMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId, version: drafted.version }, auth);
  return drafted.messageId;
}

async function realEgress(h: Harness): Promise<void> {
  await h.client.saveChatWebhook({ org: ORG, webhookUrl: WEBHOOK }, auth);
  await h.client.setEgress({ org: ORG, enabled: true }, auth);
}

describe("messages when the incident core fails", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("a draft on an incident the incident core does not know is NotFound, and nothing is drafted", async () => {
    h.peers.incidents.getIncident = failWith(Code.NotFound, "no incident");
    expect(await codeOf(h.client.draftMessage({ org: ORG, incidentId: INCIDENT, channel: "chatwebhook", body: "hello" }, auth))).toBe(Code.NotFound);
    expect(h.store.messages).toHaveLength(0);
  });

  it.each(PEER_FAILURES)("a draft while the incident core answers %s fails with it, and nothing is drafted", async (_, code) => {
    h.peers.incidents.getIncident = failWith(code);
    expect(await codeOf(h.client.draftMessage({ org: ORG, incidentId: INCIDENT, channel: "chatwebhook", body: "hello" }, auth))).toBe(code);
    expect(h.store.messages).toHaveLength(0);
  });

  it("a send whose incident is gone is NotFound, and the message stays approved", async () => {
    const id = await approvedMessage(h);
    h.peers.incidents.getIncident = failWith(Code.NotFound, "no incident");
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth))).toBe(Code.NotFound);
    expect(h.store.messages[0]!.state).toBe("approved");
    expect(h.store.updateSentEvents).toEqual([]);
  });

  it("with egress off a send is simulated at once, with its event and its timeline entry", async () => {
    const id = await approvedMessage(h);
    expect(await h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth)).toMatchObject({ messageId: id, state: "simulated" });
    expect(h.store.updateSentEvents).toEqual([`${id}:simulated`]);
    expect(h.timeline.map((t) => [t.entry?.kind, t.entry?.eventId])).toEqual([["update_simulated", `comms-message:${id}`]]);
    expect(h.store.messages[0]!.timelineRecorded).toBe(true);
    expect(h.webhook.posts).toHaveLength(0);
  });

  it("a send still succeeds when the timeline entry cannot be written; the sweep writes it once the incident core answers", async () => {
    const id = await approvedMessage(h);
    const append = h.peers.incidents.appendTimeline!;
    h.peers.incidents.appendTimeline = failWith(Code.Unavailable);
    expect((await h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth)).state).toBe("simulated");
    expect(h.store.messages[0]!.timelineRecorded).toBe(false);

    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await recordPendingTimelineEntries(h.deps, 0)).toBe(0);
    h.peers.incidents.appendTimeline = append;
    expect(await recordPendingTimelineEntries(h.deps, 0)).toBe(1);
    expect(h.timeline.map((t) => t.entry?.eventId)).toEqual([`comms-message:${id}`]);
    expect(await recordPendingTimelineEntries(h.deps, 0)).toBe(0);
  });

  it("a message is sent at most once, and approval needs the version read", async () => {
    const drafted = await h.client.draftMessage({ org: ORG, incidentId: INCIDENT, channel: "chatwebhook", body: "hello" }, auth);
    const stale = await errorOf(h.client.approveMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId, version: "7" }, auth));
    expect(stale.code).toBe(Code.Aborted);
    expect(stale.rawMessage).toContain("stale version 7");
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId }, auth))).toBe(Code.Aborted);
    await h.client.approveMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId, version: drafted.version }, auth);
    await h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId }, auth);
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: drafted.messageId }, auth))).toBe(Code.Aborted);
    expect(h.store.updateSentEvents).toHaveLength(1);
  });

  it("a message id that is not a UUID, or of another incident, is NotFound", async () => {
    const id = await approvedMessage(h);
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: "nope" }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: "0d8c5a3e-0000-4000-8000-000000000000", messageId: id }, auth))).toBe(Code.NotFound);
  });

  it("an organization the identity service does not know is NotFound; identity Unavailable is Unavailable", async () => {
    expect(await codeOf(h.client.listMessages({ org: "other", incidentId: INCIDENT }, auth))).toBe(Code.NotFound);
    h.peers.identity.authenticate = failWith(Code.Unavailable);
    expect(await codeOf(h.client.listMessages({ org: ORG, incidentId: INCIDENT }, auth))).toBe(Code.Unavailable);
  });
});

describe("sending through the chat webhook", () => {
  let h: Harness;
  beforeEach(async () => {
    h = harness();
    await realEgress(h);
  });

  it("a 2xx answer is delivery: the card is posted to the saved URL, the message is sent, the timeline says so", async () => {
    const id = await approvedMessage(h);
    expect((await h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth)).state).toBe("sent");
    expect(h.webhook.posts).toHaveLength(1);
    expect(h.webhook.posts[0]!.url).toBe(WEBHOOK);
    expect(h.webhook.posts[0]!.method).toBe("POST");
    expect(String(h.webhook.posts[0]!.body)).toContain("We are rolling back the deploy.");
    expect(h.store.updateSentEvents).toEqual([`${id}:sent`]);
    expect(h.timeline[0]!.entry).toMatchObject({ kind: "update_sent", summary: "Update posted to chatwebhook: We are rolling back the deploy." });
  });

  const failures: [string, () => Promise<EgressResponse>, string][] = [
    ["an HTTP error", answerWith(500), "Chat webhook HTTP 500"],
    [
      "a legacy connector's throttling in a 200",
      answerWith(200, "Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429"),
      "Chat webhook HTTP 429",
    ],
    [
      "a timeout",
      async () => {
        throw new EgressError("timeout", "timed out", { host: "chat.example" });
      },
      "Chat webhook did not answer within 5 s",
    ],
    [
      "a refused connection",
      async () => {
        throw new EgressError("network", "refused", { host: "chat.example", code: "ECONNREFUSED" });
      },
      "Chat webhook unreachable: connection refused (ECONNREFUSED)",
    ],
    [
      "an address the policy refuses",
      async () => {
        throw new EgressError("forbidden_address", "refused", { host: "chat.example" });
      },
      "Chat webhook refused by the egress policy: its address is not public",
    ],
  ];

  it.each(failures)("%s: the send answers Unavailable with the reason, the message is failed, the timeline shows the refusal", async (_, answer, reason) => {
    h.webhook.answer = answer;
    const id = await approvedMessage(h);
    const err = await errorOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.rawMessage).toBe(reason);
    expect(h.store.messages[0]).toMatchObject({ state: "failed", error: reason });
    expect(h.store.updateSentEvents).toEqual([]);
    const entry = h.timeline[0]?.entry;
    expect(entry?.kind).toBe("update_sent");
    expect(entry?.summary?.startsWith(`${reason}: update not delivered`)).toBe(true);
    expect(entry?.summary).not.toContain("secret-path");
    // At most once: a failed message is not sent again.
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth))).toBe(Code.Aborted);
    expect(h.webhook.posts).toHaveLength(1);
  });

  it("a bug in the sender (not an egress outcome) still moves the message out of sending", async () => {
    h.webhook.answer = async () => {
      throw new TypeError("unexpected");
    };
    const id = await approvedMessage(h);
    expect((await errorOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth))).rawMessage).toBe("Chat webhook call failed");
    expect(h.store.messages[0]!.state).toBe("failed");
  });

  it("with egress on and no connection saved, a send is refused and the message stays approved", async () => {
    await h.client.deleteChatWebhook({ org: ORG }, auth);
    const id = await approvedMessage(h);
    expect(await codeOf(h.client.sendMessage({ org: ORG, incidentId: INCIDENT, messageId: id }, auth))).toBe(Code.Aborted);
    expect(h.store.messages[0]!.state).toBe("approved");
    expect(h.webhook.posts).toHaveLength(0);
  });

  it("a URL the egress policy refuses is not saved", async () => {
    h.webhook.vetAnswer = async () => {
      throw new EgressError("forbidden_address", "refused", { host: "10.0.0.1" });
    };
    expect(await codeOf(h.client.saveChatWebhook({ org: ORG, webhookUrl: "https://10.0.0.1/hook" }, auth))).toBe(Code.InvalidArgument);
    expect(h.store.audits.filter((a) => a.kind === AUDIT_KINDS.chatWebhookSaved)).toHaveLength(1);
  });

  it("the saved URL is sealed, never stored in clear, and a test post that fails is answered and audited", async () => {
    const sealed = h.store.connections.get(`${ORG_ID}/default`)!;
    expect(sealed.ciphertext.toString("latin1")).not.toContain("secret-path");
    h.webhook.answer = answerWith(404);
    expect(await h.client.testChatWebhook({ org: ORG }, auth)).toMatchObject({ ok: false, error: "Chat webhook HTTP 404" });
    expect(h.store.audits.at(-1)).toMatchObject({ kind: AUDIT_KINDS.chatWebhookTested, data: { ok: false, error: "Chat webhook HTTP 404" } });
  });

  it("the switch and the connection changes are audited with what they replaced", async () => {
    expect(h.store.audits.map((a) => [a.kind, a.data])).toEqual([
      [AUDIT_KINDS.chatWebhookSaved, { connection: "default", replaced: false }],
      [AUDIT_KINDS.egressSwitched, { enabled: true, previous: false }],
    ]);
  });
});

describe("the war-room link", () => {
  it("is drafted once for an incident a chat message opened while a connection is saved", async () => {
    const h = harness();
    const opened = create(IncidentOpenedSchema, { orgId: ORG_ID, incidentId: INCIDENT, source: "chat", title: "Checkout is down" });
    await offerWarRoomLink(h.deps, opened);
    expect(h.store.messages).toHaveLength(0);
    await h.client.saveChatWebhook({ org: ORG, webhookUrl: WEBHOOK }, auth);
    await offerWarRoomLink(h.deps, opened);
    await offerWarRoomLink(h.deps, opened);
    expect(h.store.messages.map((m) => [m.origin, m.body])).toEqual([
      ["war_room_link", `A war room is open for "Checkout is down". Join it here: https://warroom.example/o/${ORG}/incidents/${INCIDENT}`],
    ]);
  });
});

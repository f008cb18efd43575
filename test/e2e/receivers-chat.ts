import { expect, it } from "vitest";
import { callApi } from "../support/app.js";
import {
  auditEvents,
  duringMaintenance,
  fixture,
  getIncident,
  listIncidents,
  PUBLIC_URL,
  resolveIncident,
  unique,
  UUID,
  type Answer,
  type Credentials,
  type SuiteContext,
} from "./triggers-kit.js";

/**
 * `POST /triggers/chat/{org_slug}`: JSON and form bodies, every field of the spec's table, the
 * uniform 401, the 256 KiB body limit. Fewer than 60 calls reach acme's route in this suite, so
 * the per-minute limit never interferes (its own test uses another organization).
 */

export interface ChatContext extends SuiteContext {
  /** A second organization: its admin reads where a foreign-slug failure was audited. */
  other: Credentials & { slug: string };
}

export function chatSuite(ctx: ChatContext): void {
  const post = (
    body: unknown,
    options: { secret?: string | null; slug?: string; form?: boolean; raw?: string | Buffer; contentType?: string } = {},
  ): Promise<Answer> => {
    const secret = options.secret === undefined ? ctx.creds.chatSecret : options.secret;
    const form = options.form ? new URLSearchParams(body as Record<string, string>).toString() : undefined;
    return callApi(ctx.app.url, "POST", `/triggers/chat/${options.slug ?? "acme"}`, {
      headers: {
        "content-type": options.contentType ?? (options.form ? "application/x-www-form-urlencoded" : "application/json"),
        ...(secret === null ? {} : { "x-service-chat-secret": secret }),
      },
      raw: options.raw ?? form ?? JSON.stringify(body),
    });
  };
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);
  const message = (overrides: Record<string, unknown> = {}) => ({
    channel_id: "C0LAN2Q65",
    message_id: unique("1718186712"),
    text: "Checkout failing for some users",
    ...overrides,
  });

  it("a JSON message opens 201 with the incident id and war-room URL; every field lands where the spec says", async () => {
    const body = message({
      text: "Checkout is down for EU customers\nSince 10:02, card payments time out.",
      author_pubkey: "npub1alice",
      author: "alice",
      timestamp: 1718186712,
      emoji: "rotating_light",
      trigger: "reaction_added",
    });
    const res = await post(body);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      outcome: "opened",
      incidentId: expect.stringMatching(UUID),
      entity: null,
      proposedSeverity: "sev2",
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
      reason: null,
    });
    const got = await incident(res.body.incidentId);
    expect(got).toMatchObject({ title: "Chat: Checkout is down for EU customers", severity: "sev2", source: "chat", state: "open" });
    expect(got.timeline).toHaveLength(1);
    // For chat deliveries the first entry is the chat message.
    expect(got.timeline[0]).toMatchObject({
      kind: "opened",
      summary: body.text,
      link: `chat://C0LAN2Q65/${body.message_id}`,
      alertRef: `C0LAN2Q65/${body.message_id}`,
      at: "2024-06-12T10:05:12Z",
      data: {
        channelId: "C0LAN2Q65",
        messageId: body.message_id,
        author: "npub1alice",
        authorPubkey: "npub1alice",
        emoji: "rotating_light",
        trigger: "reaction_added",
        raw: { emoji: "rotating_light", trigger: "reaction_added", channel_id: "C0LAN2Q65" },
      },
    });
  });

  it("a form body (application/x-www-form-urlencoded) is read the same way; author is read when author_pubkey is missing", async () => {
    const body = message({ text: "Payments outage in eu-west", author: "bob", timestamp: "1718186800", trigger: "message_posted" });
    const res = await post(body, { form: true });
    expect(res.status).toBe(201);
    expect(res.body.proposedSeverity).toBe("sev2");
    const [first] = (await incident(res.body.incidentId)).timeline;
    expect(first).toMatchObject({ at: "2024-06-12T10:06:40Z", data: { author: "bob", trigger: "message_posted" } });
  });

  it("the title is `Chat: <first line>` cut at 120 characters; the text is kept up to 8 KiB", async () => {
    const firstLine = "A".repeat(300);
    const text = `${firstLine}\n${"b".repeat(20_000)}`;
    const res = await post(message({ text }));
    expect(res.status).toBe(201);
    const got = await incident(res.body.incidentId);
    expect(got.title).toHaveLength(120);
    expect(got.title).toBe(`Chat: ${"A".repeat(114)}`);
    expect(Buffer.byteLength(got.timeline[0].summary, "utf8")).toBe(8 * 1024);
    expect(got.timeline[0].summary).toBe(text.slice(0, 8 * 1024));
  });

  it("without a timestamp the entry carries the delivery time", async () => {
    const before = Date.now();
    const res = await post(message());
    const at = Date.parse((await incident(res.body.incidentId)).timeline[0].at);
    expect(at).toBeGreaterThanOrEqual(before - 5_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 5_000);
  });

  it.each([
    ["P1 as a word", "P1: checkout broken", "sev2"],
    ["sev1, any case", "looks like a SEV1 to me", "sev2"],
    ["outage", "Outage in the EU region", "sev2"],
    ["down with punctuation", "is search down?", "sev2"],
    ["download is not down", "download page is slow", "sev3"],
    ["countdown is not down", "countdown timer broken", "sev3"],
    ["P10 is not P1", "ticket P10 filed", "sev3"],
    ["sev12 is not sev1", "sev12 backlog", "sev3"],
    ["none of the words", "checkout looks slow", "sev3"],
  ])("severity proposal: %s → %s", async (_case, text, severity) => {
    const res = await post(message({ text }));
    expect(res.status).toBe(201);
    expect(res.body.proposedSeverity).toBe(severity);
  });

  it("a body without channel_id or without message_id answers 200 ignored, and nothing opens", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const { channel_id: _c, ...noChannel } = message();
    const { message_id: _m, ...noMessage } = message();
    for (const [body, form] of [
      [noChannel, false],
      [noMessage, false],
      [noMessage, true],
    ] as const) {
      const res = await post(body, { form });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "ignored", incidentId: null });
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });

  it("an active maintenance window answers 200 suppressed, and nothing opens", async () => {
    await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["chat"] }, async () => {
      const res = await post(message({ text: "outage during maintenance" }));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "suppressed", incidentId: null });
    });
  });

  it("a repeat of the same message attaches and records a repeat each time, the same body too; after resolve, then archive, the same message opens a new incident", async () => {
    const body = message({ text: "checkout errors" });
    const opened = await post(body);
    expect(opened.status).toBe(201);
    // The same body again is a repeat the spec records ("a retry is safe because the message id
    // attaches it"), never the first answer replayed.
    const again = await post(body);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    for (const emoji of ["eyes", "fire"]) {
      const repeat = await post({ ...body, emoji });
      expect(repeat.status).toBe(200);
      expect(repeat.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    }
    expect((await incident(opened.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "repeat", "repeat"]);

    await resolveIncident(ctx.app, ctx.creds.owner, opened.body.incidentId, "resolve");
    const afterResolve = await post(body);
    expect(afterResolve.status).toBe(201);
    expect(afterResolve.body.incidentId).not.toBe(opened.body.incidentId);

    await resolveIncident(ctx.app, ctx.creds.owner, afterResolve.body.incidentId, "archive");
    const afterArchive = await post(body);
    expect(afterArchive.status).toBe(201);
    expect(afterArchive.body.incidentId).not.toBe(afterResolve.body.incidentId);
  });

  it.each([
    ["JSON", false],
    ["form-encoded", true],
  ] as const)("the same %s message delivered again answers attached and records a repeat", async (_label, form) => {
    const body = message({ text: "payments are down", timestamp: "1718186712" });
    const opened = await post(body, { form });
    expect(opened.status).toBe(201);
    const again = await post(body, { form });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    expect((await incident(opened.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
  });

  it("15 concurrent deliveries of one message: exactly one opened, 14 attached, 14 repeats recorded", async () => {
    const body = message({ text: "checkout is down" });
    const answers = await Promise.all(Array.from({ length: 15 }, () => post(body)));
    expect(answers.map((a) => a.status).toSorted()).toEqual([...Array(14).fill(200), 201]);
    expect(answers.map((a) => a.body.outcome).toSorted()).toEqual([...Array(14).fill("attached"), "opened"]);
    const ids = new Set(answers.map((a) => a.body.incidentId));
    expect(ids.size).toBe(1);
    const kinds = (await incident([...ids][0]!)).timeline.map((e: any) => e.kind);
    expect(kinds).toEqual(["opened", ...Array(14).fill("repeat")]);
  });

  it("a repeat's entry carries the time it arrived, the message's own timestamp in its data", async () => {
    const body = message({ text: "checkout errors again", timestamp: 1718186712 });
    const opened = await post(body);
    const before = Date.now();
    const again = await post(body);
    expect(again.body.outcome).toBe("attached");
    const [first, repeat] = (await incident(opened.body.incidentId)).timeline;
    // The trigger entry carries the message's time, as the spec's table says.
    expect(first.at).toBe("2024-06-12T10:05:12Z");
    expect(Date.parse(repeat.at)).toBeGreaterThanOrEqual(before - 5_000);
    expect(Date.parse(repeat.at)).toBeLessThanOrEqual(Date.now() + 5_000);
    expect(Date.parse(repeat.data.occurredAt)).toBe(Date.parse("2024-06-12T10:05:12Z"));
  });

  it("a Slack workflow: the raw event is ignored; the custom step's inputs mapped onto the route open with the message link", async () => {
    const event = fixture("slack/function-executed-custom-step.json");
    const raw = await post(event);
    expect(raw.status).toBe(200);
    expect(raw.body.outcome).toBe("ignored");
    const inputs = event.event.inputs;
    const mapped = {
      channel_id: inputs.channel_id,
      message_id: inputs.message_ts,
      text: "Checkout is down",
      author: inputs.reactor_id,
      timestamp: inputs.message_ts,
      emoji: inputs.reaction,
      trigger: "reaction_added",
      message_link: inputs.message_link,
    };
    const res = await post(mapped, { form: true });
    expect(res.status).toBe(201);
    const [first] = (await incident(res.body.incidentId)).timeline;
    expect(first).toMatchObject({ link: inputs.message_link, data: { emoji: "rotating_light", author: "U061F7AUR" } });
    // message_ts as unix seconds with a fraction.
    expect(first.at).toMatch(/^2024-06-12T10:05:12\.348/);
  });

  it("a missing or wrong secret, or a slug that is not the secret's organization: one uniform 401, the reason only in the audit log", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const answers = [
      await post(message(), { secret: null }),
      await post(message(), { secret: "0".repeat(64) }),
      await post(message(), { secret: ctx.creds.ingestToken }),
      // acme's secret on the other organization's route, and the other's secret on acme's.
      await post(message(), { slug: ctx.other.slug }),
      await post(message(), { secret: ctx.other.chatSecret }),
    ];
    for (const res of answers) {
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "unauthorized" });
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    // Failures from one address with one reason in one minute share a row, with a count.
    const reasons = (events: any[]) =>
      events
        .filter((e) => e.data.receiver === "chat")
        .flatMap((e) => Array(Number(e.data.count ?? 1)).fill(e.data.reason as string))
        .sort();
    const acme = await auditEvents(ctx.app, ctx.creds.owner, "receiver.auth_failed", (events) => reasons(events).length >= 4);
    expect(reasons(acme)).toEqual(["secret missing", "secret wrong", "secret wrong", "slug is not the secret's organization"]);
    const other = await auditEvents(ctx.app, ctx.other.owner, "receiver.auth_failed", (events) => reasons(events).length >= 1, 10_000, ctx.other.slug);
    expect(reasons(other)).toEqual(["slug is not the secret's organization"]);
  });

  it("a body over 256 KiB answers 413 without being read; just under is accepted", async () => {
    const tooBig = JSON.stringify(message({ text: "x".repeat(256 * 1024) }));
    const res = await post(undefined, { raw: tooBig });
    expect(res.status).toBe(413);
    expect(res.body).toEqual({ error: "request body is larger than 262144 bytes" });
    const underLimit = await post(undefined, { raw: JSON.stringify(message({ text: "y".repeat(250 * 1024) })) });
    expect(underLimit.status).toBe(201);
  });

  it("a body that is neither JSON nor form fields is ignored, never a 5xx", async () => {
    for (const raw of ["{not json", "[1,2,3]", ""]) {
      const res = await post(undefined, { raw });
      expect(res.status, raw).toBe(200);
      expect(res.body.outcome).toBe("ignored");
    }
  });
}

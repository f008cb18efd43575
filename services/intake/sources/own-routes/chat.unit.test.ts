import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as chat from "./chat.js";
import type { AlertInit } from "../types.js";

const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const fixture = (name: string): unknown => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8"));
const receivedAt = new Date("2024-06-12T12:00:00Z");
const context = { receivedAt };
const message = { channel_id: "C0LAN2Q65", message_id: "1718186712.348119", text: "Checkout is failing" };

function alertOf(body: unknown): AlertInit {
  const delivery = chat.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

describe("chat message mapping", () => {
  it("maps a JSON delivery", () => {
    const alert = alertOf({
      ...message,
      author_pubkey: "npub1alice",
      author: "alice",
      timestamp: 1718186712,
      emoji: "rotating_light",
      trigger: "reaction_added",
    });
    expect(alert).toEqual({
      source: "chat",
      attachIdentity: "chat:1718186712.348119",
      eventId: "",
      kind: "alert",
      title: "Chat: Checkout is failing",
      severity: "sev3",
      summary: "Checkout is failing",
      link: "chat://C0LAN2Q65/1718186712.348119",
      alertRef: "C0LAN2Q65/1718186712.348119",
      occurredAt: expect.objectContaining({ seconds: 1718186712n, nanos: 0 }),
      data: {
        channelId: "C0LAN2Q65",
        messageId: "1718186712.348119",
        author: "npub1alice",
        authorPubkey: "npub1alice",
        emoji: "rotating_light",
        trigger: "reaction_added",
        raw: {
          channel_id: "C0LAN2Q65",
          message_id: "1718186712.348119",
          text: "Checkout is failing",
          author_pubkey: "npub1alice",
          author: "alice",
          timestamp: 1718186712,
          emoji: "rotating_light",
          trigger: "reaction_added",
        },
      },
    });
  });

  it("maps a form delivery the same way", () => {
    const form = "channel_id=C1&message_id=M1&text=Payments+are+down%0Asecond+line&author=bob&timestamp=1718186712&emoji=fire&trigger=message_posted";
    const fromForm = alertOf(chat.parseChatForm(form));
    const fromParams = alertOf(new URLSearchParams(form));
    expect(fromForm).toEqual(fromParams);
    expect(fromForm).toMatchObject({
      attachIdentity: "chat:M1",
      title: "Chat: Payments are down",
      severity: "sev2",
      summary: "Payments are down\nsecond line",
      occurredAt: expect.objectContaining({ seconds: 1718186712n }),
      data: expect.objectContaining({ author: "bob", emoji: "fire", trigger: "message_posted", channelId: "C1" }),
    });
  });

  it("the first value of a repeated form field wins, and __proto__ fields are dropped", () => {
    const fields = chat.parseChatForm("channel_id=A&channel_id=B&message_id=M&__proto__=x&constructor=y");
    expect(fields.channel_id).toBe("A");
    expect(Object.hasOwn(fields, "__proto__")).toBe(false);
    expect(alertOf(fields).data?.raw).toMatchObject({ constructor: "y" });
  });

  it("author is read when author_pubkey is missing", () => {
    expect(alertOf({ ...message, author: "alice" }).data).toMatchObject({ author: "alice" });
    expect(alertOf({ ...message, author: "alice" }).data?.authorPubkey).toBeUndefined();
    expect(alertOf({ ...message, author_pubkey: " ", author: "alice" }).data).toMatchObject({ author: "alice" });
    expect(alertOf(message).data?.author).toBeUndefined();
  });

  it("the message id is the attach identity; a repeat is recorded each time (no event id)", () => {
    const first = alertOf(message);
    const repeat = alertOf({ ...message, text: "still failing" });
    expect(repeat.attachIdentity).toBe(first.attachIdentity);
    expect(first.eventId).toBe("");
    expect(alertOf({ ...message, message_id: "other" }).attachIdentity).not.toBe(first.attachIdentity);
  });

  it("numeric ids (unquoted in a template) are read as text", () => {
    expect(alertOf({ channel_id: 42, message_id: 7 }).attachIdentity).toBe("chat:7");
  });

  it("an http(s) permalink sent along is the link back", () => {
    expect(alertOf({ ...message, message_link: "https://chat.example.com/archives/C0LAN2Q65/p1" }).link).toBe("https://chat.example.com/archives/C0LAN2Q65/p1");
    expect(alertOf({ ...message, message_link: "javascript:alert(1)" }).link).toBe("chat://C0LAN2Q65/1718186712.348119");
    expect(alertOf({ channel_id: "a/b", message_id: "c d" }).link).toBe("chat://a%2Fb/c%20d");
  });
});

describe("chat required fields", () => {
  it.each<[string, unknown, string]>([
    ["no channel_id", { message_id: "M1", text: "x" }, "channel_id is missing"],
    ["blank channel_id", { channel_id: " ", message_id: "M1" }, "channel_id is missing"],
    ["no message_id", { channel_id: "C1", text: "x" }, "message_id is missing"],
    ["message_id null", { channel_id: "C1", message_id: null }, "message_id is missing"],
    ["message_id an object", { channel_id: "C1", message_id: { id: 1 } }, "message_id is missing"],
    ["empty body", {}, "channel_id is missing"],
    ["empty form", new URLSearchParams(""), "channel_id is missing"],
    ["array body", [message], "channel_id is missing"],
    ["string body", "channel_id=C1", "channel_id is missing"],
    ["null body", null, "channel_id is missing"],
  ])("%s → ignored", (_name, body, reason) => {
    expect(chat.map(body, context)).toEqual({ outcome: "ignored", reason });
  });

  it("what a chat tool's workflow step sends unmapped carries no top-level ids and is ignored", () => {
    expect(chat.map(fixture("slack/function-executed-custom-step.json"), context)).toMatchObject({ outcome: "ignored" });
  });
});

describe("chat title", () => {
  it.each<[string, string]>([
    ["Checkout is failing", "Chat: Checkout is failing"],
    ["first line\nsecond line", "Chat: first line"],
    ["first line\r\nsecond line", "Chat: first line"],
    ["\n\n   \n  indented first  \nsecond", "Chat: indented first"],
    ["", "Chat: message in C0LAN2Q65"],
    ["   \n  ", "Chat: message in C0LAN2Q65"],
  ])("%j → %j", (text, title) => {
    expect(alertOf({ ...message, text }).title).toBe(title);
  });

  it("is cut at 120 characters", () => {
    const title = alertOf({ ...message, text: "x".repeat(500) }).title as string;
    expect(title).toHaveLength(120);
    expect(title).toBe(`Chat: ${"x".repeat(114)}`);
  });

  it("counts characters, not UTF-16 units, and never splits one", () => {
    const title = alertOf({ ...message, text: "🔥".repeat(200) }).title as string;
    expect([...title]).toHaveLength(120);
    expect(title.endsWith("🔥")).toBe(true);
  });

  it("a non-string text is no text", () => {
    expect(alertOf({ ...message, text: 42 }).title).toBe("Chat: message in C0LAN2Q65");
    expect(alertOf({ ...message, text: 42 }).summary).toBeUndefined();
  });
});

describe("chat text kept up to 8 KiB", () => {
  it.each<[string, string, number, number]>([
    ["ASCII", "a", 10_000, 8192],
    ["two-byte characters", "é", 5_000, 8192],
    ["three-byte characters", "€", 3_000, 8190],
    ["four-byte characters", "😀", 3_000, 8192],
  ])("%s are cut on a character boundary", (_name, unit, count, expectedBytes) => {
    const text = unit.repeat(count);
    const alert = alertOf({ ...message, text });
    const summary = alert.summary as string;
    expect(utf8Bytes(summary)).toBe(expectedBytes);
    expect(text.startsWith(summary)).toBe(true);
    expect(summary.endsWith(unit)).toBe(true);
    expect(alert.data).toMatchObject({ textTruncated: true });
    expect(utf8Bytes((alert.data?.raw as Record<string, string> | undefined)?.text ?? "")).toBe(expectedBytes);
  });

  it("a text of exactly 8 KiB is kept whole", () => {
    const text = "a".repeat(8192);
    const alert = alertOf({ ...message, text });
    expect(alert.summary).toBe(text);
    expect(alert.data?.textTruncated).toBeUndefined();
  });
});

describe("chat severity proposal", () => {
  it.each<[string, string]>([
    ["P1 incident on checkout", "sev2"],
    ["this is a p1", "sev2"],
    ["(P1)", "sev2"],
    ["sev1: payments", "sev2"],
    ["SEV1", "sev2"],
    ["Outage in eu-west", "sev2"],
    ["OUTAGE", "sev2"],
    ["checkout is down", "sev2"],
    ["Checkout is DOWN.", "sev2"],
    ["down", "sev2"],
    ["is it down?", "sev2"],
    ["down\nand out", "sev2"],
    ["download failed", "sev3"],
    ["downtime planned", "sev3"],
    ["slowdown", "sev3"],
    ["breakdown", "sev3"],
    ["shutdown_now", "sev3"],
    ["P10 backlog", "sev3"],
    ["P1a", "sev3"],
    ["sev12", "sev3"],
    ["sev1x", "sev3"],
    ["outages", "sev3"],
    ["downé", "sev3"],
    ["all good", "sev3"],
    ["", "sev3"],
  ])("%j → %s", (text, severity) => {
    expect(alertOf({ ...message, text }).severity).toBe(severity);
  });
});

describe("chat time", () => {
  const iso = (alert: AlertInit) => {
    const occurred = alert.occurredAt as { seconds: bigint; nanos: number };
    return new Date(Number(occurred.seconds) * 1000 + occurred.nanos / 1e6).toISOString();
  };

  it.each<[unknown, string]>([
    [1718186712, "2024-06-12T10:05:12.000Z"],
    ["1718186712", "2024-06-12T10:05:12.000Z"],
    ["1718186712.348119", "2024-06-12T10:05:12.348Z"],
    [undefined, receivedAt.toISOString()],
    ["yesterday", receivedAt.toISOString()],
    [-1, receivedAt.toISOString()],
    [1e20, receivedAt.toISOString()],
    [null, receivedAt.toISOString()],
  ])("timestamp %j → %s", (timestamp, expected) => {
    expect(iso(alertOf({ ...message, timestamp }))).toBe(expected);
  });
});

describe("chat recognition", () => {
  it.each<[unknown, boolean]>([
    [message, true],
    [{}, true],
    [new URLSearchParams("a=b"), true],
    [null, false],
    ["text", false],
    [[], false],
  ])("%j → %s", (body, expected) => {
    expect(chat.recognize(body)).toBe(expected);
  });
});

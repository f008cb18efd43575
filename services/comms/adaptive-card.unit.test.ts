import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { buildTestCard, buildUpdateCard, CARD_BYTE_LIMIT, payloadBytes } from "./adaptive-card.js";
import { BODY_MAX_BYTES } from "./messages.js";
import { chatWebhookPayloadProblems } from "./testing/adaptive-card-validation.js";

const update = {
  incidentTitle: "Chat: checkout is down",
  severity: "sev1",
  incidentState: "open",
  text: "We rolled back the deploy. Next update in 30 minutes.\n\nAction: page the database on-call if error rate stays above 5%.",
  workspaceUrl: "https://warroom.example.test/o/acme/incidents/0b1c",
};

describe("adaptive card", () => {
  it("the validator accepts the chat product's own sample card and rejects broken ones", () => {
    const fixture = JSON.parse(readFileSync(new URL("../../test/fixtures/teams/workflows-adaptive-card-alert.json", import.meta.url), "utf8"));
    expect(chatWebhookPayloadProblems(fixture)).toEqual([]);
    const badColor = structuredClone(fixture);
    badColor.attachments[0].content.body[0].color = "Purple";
    expect(chatWebhookPayloadProblems(badColor).join("\n")).toMatch(/Invalid value "Purple"/);
    const unknownProperty = structuredClone(fixture);
    unknownProperty.attachments[0].content.body[1].blink = true;
    expect(chatWebhookPayloadProblems(unknownProperty).join("\n")).toMatch(/dropped/);
    const noText = structuredClone(fixture);
    delete noText.attachments[0].content.body[1].text;
    expect(chatWebhookPayloadProblems(noText)).toContain("a TextBlock without text");
    expect(chatWebhookPayloadProblems({ ...fixture, type: "card" })).toContain('envelope type is not "message"');
  });

  it("an update card: title, severity, the text and the room link written out, no action buttons, version 1.4", () => {
    const payload = buildUpdateCard(update);
    expect(chatWebhookPayloadProblems(payload)).toEqual([]);
    const card = payload.attachments[0].content as {
      version: string;
      body: { type: string; text?: string; color?: string; facts?: unknown }[];
      actions?: unknown;
    };
    expect(card.version).toBe("1.4");
    expect(card.actions).toBeUndefined();
    // The title came from an alert: a TextRun, which is never read as markdown.
    expect(card.body[0]).toMatchObject({ type: "RichTextBlock", inlines: [{ type: "TextRun", text: update.incidentTitle, color: "Attention" }] });
    expect(card.body[1]!.facts).toEqual([
      { title: "Severity", value: "SEV1" },
      { title: "State", value: "open" },
    ]);
    expect(card.body[2]!.text).toBe(update.text);
    expect(card.body[3]!.text).toBe(`War room: [${update.workspaceUrl}](${update.workspaceUrl})`);
    expect(JSON.stringify(payload)).not.toMatch(/Action\./);
  });

  it("stays within the channel's size limit even for the longest body in its worst JSON escaping", () => {
    const worst = "\u0001".repeat(BODY_MAX_BYTES); // six bytes each once escaped
    const payload = buildUpdateCard({ ...update, text: worst, incidentTitle: "t".repeat(5000) });
    expect(payloadBytes(payload)).toBeLessThanOrEqual(CARD_BYTE_LIMIT);
    expect(chatWebhookPayloadProblems(payload)).toEqual([]);
    const card = payload.attachments[0].content as { body: { text: string; inlines?: { text: string }[] }[] };
    expect(card.body[2]!.text).toMatch(/shortened to fit the chat channel's size limit\)$/);
    expect([...card.body[0]!.inlines![0]!.text].length).toBe(200);
    // The link is never what gets cut.
    expect(card.body[3]!.text).toContain(update.workspaceUrl);
    // A body that fits is sent whole.
    const fits = "é".repeat(BODY_MAX_BYTES / 2);
    expect((buildUpdateCard({ ...update, text: fits }).attachments[0].content as { body: { text: string }[] }).body[2]!.text).toBe(fits);
  });

  it("the test card is a valid card too", () => {
    expect(chatWebhookPayloadProblems(buildTestCard({ orgSlug: "acme", consoleUrl: "https://warroom.example.test/o/acme/incidents" }))).toEqual([]);
  });
});

describe("the war-room card the system drafts", () => {
  it("carries the drafted text only as a TextRun, never in a TextBlock that takes markdown, and stays a valid card", () => {
    const title = "payments down [x](http://evil.example) <b>now</b>";
    const payload = buildUpdateCard({ ...update, incidentTitle: title, text: `A war room is open for "${title}".`, textIsLiteral: true });
    expect(chatWebhookPayloadProblems(payload)).toEqual([]);
    const markdownTexts = JSON.stringify(
      (payload.attachments[0].content.body as { type: string; text?: string }[]).filter((e) => e.type === "TextBlock").map((e) => e.text),
    );
    expect(markdownTexts).not.toContain("evil.example");
    expect(JSON.stringify(payload)).toContain('"type":"TextRun","text":"A war room is open for');
  });
});

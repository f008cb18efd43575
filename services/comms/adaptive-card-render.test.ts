import { createRequire } from "node:module";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildUpdateCard } from "./adaptive-card.js";
import { warRoomLinkText } from "./war-room-link.js";

/**
 * Alert content is literal in the card: the card is rendered to HTML by the official Adaptive
 * Cards renderer (the `adaptivecards` package) in Chromium, with markdown turned on as the chat
 * product does, and the alert's link must not become an anchor, while the approved text's does.
 */
const CHROMIUM = "/usr/bin/chromium";
const require = createRequire(import.meta.url);
const RENDERER = require.resolve("adaptivecards/dist/adaptivecards.min.js");

let browser: Browser;

beforeAll(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
});
afterAll(async () => {
  await browser?.close();
});

/** The card's HTML, as the renderer draws it with markdown processing on. */
async function renderedHtml(content: unknown): Promise<string> {
  const page = await browser.newPage();
  try {
    await page.setContent("<!doctype html><html><body><div id=card></div></body></html>");
    await page.addScriptTag({ path: RENDERER });
    return await page.evaluate((card) => {
      // Runs in the page: its globals, not Node's.
      const win = globalThis as any;
      const AC = win.AdaptiveCards;
      // The subset of markdown the chat product renders in a TextBlock (links, bold, italic), as the
      // host's markdown processor hook does it; the renderer calls it only for text that takes markdown.
      AC.AdaptiveCard.onProcessMarkdown = (text: string, result: { outputHtml?: string; didProcess: boolean }) => {
        const escaped = text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
        result.outputHtml = escaped
          .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, '<a href="$2">$1</a>')
          .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
          .replace(/_([^_]+)_/g, "<em>$1</em>");
        result.didProcess = true;
      };
      const adaptive = new AC.AdaptiveCard();
      adaptive.parse(card);
      const element = adaptive.render();
      win.document.getElementById("card").appendChild(element);
      return element.outerHTML as string;
    }, content);
  } finally {
    await page.close();
  }
}

describe("an update card rendered", () => {
  it("shows the alert's title literally, and the approved text with its formatting", async () => {
    const title = "DB down [Click to re-authenticate](https://evil.example/phish) **URGENT**";
    const payload = buildUpdateCard({
      incidentTitle: title,
      severity: "sev1",
      incidentState: "open",
      text: "Failover done, see [the runbook](https://runbooks.example/db) **now**.",
      workspaceUrl: "https://warroom.example/o/acme/incidents/1",
    });
    const html = await renderedHtml(payload.attachments[0].content);
    // The alert's link is text, not an anchor, and its emphasis is not bold.
    expect(html).not.toContain('href="https://evil.example/phish"');
    expect(html).toContain("[Click to re-authenticate](https://evil.example/phish) **URGENT**");
    // The person's text keeps its markdown: the renderer did process markdown where it applies.
    expect(html).toContain('href="https://runbooks.example/db"');
    expect(html).toMatch(/<strong[^>]*>now<\/strong>/);
  });
});

describe("the war-room card the system drafts from a chat message", () => {
  it("shows the message's text literally: no live link, no emphasis, no HTML from alert text", async () => {
    const title = 'payments down [x](http://evil.example) <a href="http://evil.example/html">click</a> **now**';
    const workspaceUrl = "https://warroom.example/o/acme/incidents/1";
    const payload = buildUpdateCard({
      incidentTitle: title,
      severity: "sev2",
      incidentState: "open",
      text: warRoomLinkText(title, workspaceUrl),
      textIsLiteral: true,
      workspaceUrl,
    });
    const html = await renderedHtml(payload.attachments[0].content);
    // No anchor element from alert text: the tag is shown escaped, as text (`&lt;a href=...`).
    expect(html).not.toMatch(/<a\b[^>]*href="http:\/\/evil\.example/);
    expect(html).toContain('&lt;a href="http://evil.example/html"&gt;click&lt;/a&gt;');
    expect(html).not.toMatch(/<strong[^>]*>now<\/strong>/);
    expect(html).toContain("[x](http://evil.example)");
    // The room's own link line is still a link.
    expect(html).toContain(`href="${workspaceUrl}"`);
  });
});

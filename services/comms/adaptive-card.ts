/**
 * The post a team-chat Workflows webhook takes: a "message" envelope around one Adaptive Card
 * (version 1.4, the newest the Workflows path is known to render). Every update is a new card; a
 * card carries no Action.* elements: the room link and any action are written out as text.
 */

/** The channel's message size limit is 28 KB (28,672 bytes observed); we stay clear of it. */
export const CARD_BYTE_LIMIT = 28_000;
export const CARD_VERSION = "1.4";
const TITLE_MAX_CHARS = 200;
const SHORTENED_NOTE = "\n\n… (shortened to fit the chat channel's size limit)";

export interface UpdateCardInput {
  incidentTitle: string;
  /** sev1 .. sev4. */
  severity: string;
  /** open, resolved or archived. */
  incidentState: string;
  /** The update text, as approved. */
  text: string;
  /**
   * The text was drafted by the system from alert content (the war-room offer quotes the chat
   * message): shown literally, as the title is, since no person wrote its markdown.
   */
  textIsLiteral?: boolean;
  /** Opens the room. */
  workspaceUrl: string;
}

export interface TestCardInput {
  orgSlug: string;
  consoleUrl: string;
}

type CardElement = Record<string, unknown>;

export interface ChatWebhookPayload {
  type: "message";
  attachments: [{ contentType: "application/vnd.microsoft.card.adaptive"; contentUrl: null; content: Record<string, unknown> }];
}

function envelope(body: CardElement[]): ChatWebhookPayload {
  return {
    type: "message",
    attachments: [
      {
        contentType: "application/vnd.microsoft.card.adaptive",
        contentUrl: null,
        content: {
          $schema: "http://adaptivecards.io/schemas/adaptive-card.json",
          type: "AdaptiveCard",
          version: CARD_VERSION,
          msteams: { width: "Full" },
          body,
        },
      },
    ],
  };
}

function severityColor(severity: string): string {
  if (severity === "sev1") return "Attention";
  if (severity === "sev2") return "Warning";
  return "Default";
}

function shortenChars(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`;
}

/** A link written out as text (markdown), never a button. */
function linkLine(label: string, url: string): string {
  // Brackets and parentheses in the URL would end the markdown link early.
  const safe = url.replace(/[()[\]\s]/g, (c) => encodeURIComponent(c));
  return `${label}: [${safe}](${safe})`;
}

/**
 * Text that came from an alert (the incident's title), shown literally: a TextRun is never read as
 * markdown, where a TextBlock's text is. Whoever controls alert content must not be able to put a
 * live link, emphasis or mention into the team's channel.
 */
function literalBlock(text: string, style: Record<string, unknown>): CardElement {
  return { type: "RichTextBlock", inlines: [{ type: "TextRun", text, ...style }] };
}

function updateBody(input: UpdateCardInput, text: string): CardElement[] {
  return [
    literalBlock(shortenChars(input.incidentTitle || "Incident", TITLE_MAX_CHARS), {
      size: "Large",
      weight: "Bolder",
      color: severityColor(input.severity),
    }),
    {
      type: "FactSet",
      facts: [
        { title: "Severity", value: input.severity.toUpperCase() || "unknown" },
        { title: "State", value: input.incidentState || "open" },
      ],
    },
    // The update text a person wrote and approved: its markdown is theirs, and kept.
    input.textIsLiteral ? { ...literalBlock(text, {}), spacing: "Medium" } : { type: "TextBlock", text, wrap: true, spacing: "Medium" },
    { type: "TextBlock", text: linkLine("War room", input.workspaceUrl), wrap: true, spacing: "Medium", isSubtle: true },
  ];
}

/** The size of a webhook post in UTF-8 bytes, as the channel counts it against its limit. */
export function payloadBytes(payload: ChatWebhookPayload): number {
  return Buffer.byteLength(JSON.stringify(payload), "utf8");
}

/**
 * The card for one approved update, within the channel's size limit: when the text would not fit,
 * it is cut (never the title, severity or link) and says so.
 */
export function buildUpdateCard(input: UpdateCardInput): ChatWebhookPayload {
  const whole = envelope(updateBody(input, input.text));
  if (payloadBytes(whole) <= CARD_BYTE_LIMIT) return whole;
  const chars = [...input.text];
  // The longest prefix that fits, found by bisection over code points (JSON escaping makes the
  // byte size of a prefix hard to predict).
  let low = 0;
  let high = chars.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    const candidate = envelope(updateBody(input, chars.slice(0, mid).join("") + SHORTENED_NOTE));
    if (payloadBytes(candidate) <= CARD_BYTE_LIMIT) low = mid;
    else high = mid - 1;
  }
  return envelope(updateBody(input, chars.slice(0, low).join("") + SHORTENED_NOTE));
}

/** The card Test connection posts, whether or not real egress is on. */
export function buildTestCard(input: TestCardInput): ChatWebhookPayload {
  return envelope([
    { type: "TextBlock", text: "Test message from warroom", size: "Large", weight: "Bolder", wrap: true },
    {
      type: "TextBlock",
      text: `This channel is connected to the organization ${input.orgSlug}. Incident updates appear here once a person approves them and real egress is on.`,
      wrap: true,
    },
    { type: "TextBlock", text: linkLine("Console", input.consoleUrl), wrap: true, isSubtle: true },
  ]);
}

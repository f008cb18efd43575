import { createRequire } from "node:module";

/**
 * Test-only: checks a card with the official Adaptive Cards object model (the `adaptivecards`
 * package). A card is accepted when the parser reports no event (unknown element or action type,
 * invalid property value, unsupported version), property validation reports nothing, and the
 * parsed card serializes back to exactly what was sent: a property the schema does not know would
 * be dropped on the way and show up as a difference. `msteams` is the host extension the chat
 * product reads and the object model does not carry.
 */

interface ParseContext {
  eventCount: number;
  getEventAt(index: number): { message: string };
}
interface ParsedCard {
  parse(json: unknown, context: ParseContext): void;
  validateProperties(): { validationEvents: { message: string }[] };
  toJSON(): unknown;
}
interface AdaptiveCardsModule {
  AdaptiveCard: new () => ParsedCard;
  SerializationContext: new () => ParseContext;
}

const require = createRequire(import.meta.url);
let module: AdaptiveCardsModule | undefined;

function adaptiveCards(): AdaptiveCardsModule {
  // The package's CommonJS bundle runs in Node without a DOM for parsing and serializing.
  module ??= require("adaptivecards/dist/adaptivecards.js") as AdaptiveCardsModule;
  return module;
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, sortKeys(v)]),
    );
  }
  return value;
}

/** Problems with an Adaptive Card (the `content` of the attachment); empty when it is valid. */
export function adaptiveCardProblems(content: unknown): string[] {
  const { AdaptiveCard, SerializationContext } = adaptiveCards();
  const problems: string[] = [];
  if (!content || typeof content !== "object") return ["the card is not an object"];
  const card = content as Record<string, unknown>;
  if (card.type !== "AdaptiveCard") problems.push(`type is ${String(card.type)}, not AdaptiveCard`);
  const parsed = new AdaptiveCard();
  const context = new SerializationContext();
  parsed.parse(card, context);
  for (let i = 0; i < context.eventCount; i++) problems.push(`parse: ${context.getEventAt(i).message}`);
  for (const event of parsed.validateProperties().validationEvents) problems.push(`validate: ${event.message}`);
  const { msteams: _host, ...portable } = card;
  const roundTrip = JSON.stringify(sortKeys(parsed.toJSON()));
  if (roundTrip !== JSON.stringify(sortKeys(portable))) problems.push(`properties the schema does not know were dropped: ${roundTrip}`);
  // What the object model does not insist on but the published schema requires.
  for (const element of (card.body as Record<string, unknown>[] | undefined) ?? []) {
    if (element.type === "TextBlock" && (typeof element.text !== "string" || element.text === "")) problems.push("a TextBlock without text");
    if (element.type === "FactSet") {
      const facts = element.facts as { title?: unknown; value?: unknown }[] | undefined;
      if (!Array.isArray(facts) || facts.length === 0) problems.push("a FactSet without facts");
      else if (facts.some((f) => typeof f.title !== "string" || typeof f.value !== "string")) problems.push("a fact without title or value");
    }
  }
  return problems;
}

/** Problems with the whole webhook post: the message envelope and its one card. */
export function chatWebhookPayloadProblems(payload: unknown): string[] {
  const p = payload as { type?: unknown; attachments?: { contentType?: unknown; contentUrl?: unknown; content?: unknown }[] };
  const problems: string[] = [];
  if (p?.type !== "message") problems.push('envelope type is not "message"');
  if (!Array.isArray(p?.attachments) || p.attachments.length !== 1) return [...problems, "not exactly one attachment"];
  const [attachment] = p.attachments;
  if (attachment!.contentType !== "application/vnd.microsoft.card.adaptive") problems.push("attachment contentType is not an Adaptive Card");
  if (attachment!.contentUrl !== null) problems.push("attachment contentUrl is not null");
  return [...problems, ...adaptiveCardProblems(attachment!.content)];
}

import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentOpenedSchema, IncidentResolvedSchema, IncidentUnacknowledgedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { envelope, fromIncidentOpened, fromIncidentResolved, fromIncidentUnacknowledged, type WebhookEvent } from "../../services/subscriptions/event-types.js";

/**
 * The subscriptions guide's recipe "Escalation to a second ntfy topic", run as written against an
 * ntfy stand-in on loopback (its one change: the ntfy host), fed the payloads the service sends:
 * the team's topic hears of the incident and of the first missed deadline, the lead's of every later one.
 */

const PAGE = readFileSync(join(import.meta.dirname, "../../docs/how-to/subscriptions.md"), "utf8");
const RECIPE_AT = PAGE.indexOf("**Escalation to a second ntfy topic**");
const CODE = PAGE.slice(PAGE.indexOf("```js", RECIPE_AT) + "```js".length, PAGE.indexOf("```", PAGE.indexOf("```js", RECIPE_AT) + 5));

const PUBLIC_URL = "https://warroom.example.com";
const INCIDENT = "0f8fad5b-d9cb-469f-a165-70867728950e";
const at = timestampFromDate(new Date("2026-12-01T10:00:00Z"));

let server: Server;
let base: string;
const posts: { topic: string; headers: IncomingHttpHeaders; body: string }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      posts.push({ topic: req.url!.slice(1), headers: req.headers, body });
      res.end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** The recipe's onEvent, with NTFY_TOPIC and NTFY_LEAD_TOPIC set. */
function recipe(): (event: { type: string; data: Record<string, unknown> }) => Promise<void> {
  expect(CODE).toContain("https://ntfy.sh/");
  const code = CODE.replaceAll("https://ntfy.sh/", base);
  const env = { NTFY_TOPIC: "team-topic", NTFY_LEAD_TOPIC: "lead-topic" };
  return new Function("process", `${code}\nreturn onEvent;`)({ env });
}

/** The body a subscription receives for an event, parsed as a receiver parses it. */
const delivered = (event: WebhookEvent) => JSON.parse(envelope(event.type, event.at, event.data("acme")));

describe("the escalation to a second ntfy topic recipe", () => {
  it("notifies the team of the incident and its first missed deadline, and the lead of every later one", async () => {
    const onEvent = recipe();
    const common = { orgId: "org-1", incidentId: INCIDENT, title: "Checkout errors", severity: "sev1", source: "alertmanager", at };
    await onEvent(delivered(fromIncidentOpened(PUBLIC_URL, create(IncidentOpenedSchema, common))));
    for (const [step, minutes] of [
      [1, 5],
      [2, 15],
      [3, 30],
    ] as const) {
      await onEvent(
        delivered(fromIncidentUnacknowledged(PUBLIC_URL, create(IncidentUnacknowledgedSchema, { ...common, step, steps: 3, minutes, deadline: at }))),
      );
    }
    // Another event type is not the recipe's: nothing is sent.
    await onEvent(
      delivered(
        fromIncidentResolved(PUBLIC_URL, create(IncidentResolvedSchema, { orgId: "org-1", incidentId: INCIDENT, state: "resolved", actor: "a@b.c", at }))!,
      ),
    );

    const link = `${PUBLIC_URL}/o/acme/incidents/${INCIDENT}`;
    expect(posts.map((p) => [p.topic, p.headers.title, p.headers.priority, p.body])).toEqual([
      ["team-topic", "sev1 Checkout errors", "high", link],
      ["team-topic", "Not acknowledged after 5 min (step 1 of 3): Checkout errors", "high", link],
      ["lead-topic", "Not acknowledged after 15 min (step 2 of 3): Checkout errors", "urgent", link],
      ["lead-topic", "Not acknowledged after 30 min (step 3 of 3): Checkout errors", "urgent", link],
    ]);
    for (const post of posts) expect(post.headers.click).toBe(link);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LARGE_BODY_BYTES } from "../../services/intake/custom-sources/large-bodies.js";
import { OWNER } from "../support/app.js";
import { bootstrapOrg, type Credentials, getIncident, MODES, postTrigger, startIntakeApp, unique, type IntakeApp } from "./triggers-kit.js";

/**
 * A preview's payload and a built-in source's alert under a grouping override, when over
 * LARGE_BODY_BYTES, have their rules run on the large-body worker threads
 * (services/intake/custom-sources/large-bodies.ts), in the organization's turn there: hostile rules
 * over about 1 MiB end in a mapping error (the preview's answer; the source's own grouping for the
 * alert), and another organization's triggers are answered while that work is in flight.
 */

/** About 1 MiB of JSON in strings each under the 64 KiB that rules read. */
const PARTS = Array.from({ length: 16 }, (_, i) => `${i} ${"ab ".repeat(20_000)}`);
/** Rules over PARTS that each ran for seconds when a CEL call was charged after it returned. */
const HOSTILE = {
  nested: "body.parts.exists(p, p.replace('a', p.replace('b', p)).size() == 0)",
  splitJoin: "body.parts.map(p, p.split('').join('-').upperAscii()).join('')",
  matches: "body.parts.exists(p, p.matches('^(a|b| )*c$'))",
};
const STOPPED = /^(cost budget of \d+ exceeded|evaluation ran past its time bound of \d+ ms|the mapping ran past its time bound of \d+ ms)$/;

describe.each(MODES)("large previews and grouping overrides on worker threads (%s)", (mode) => {
  let app: IntakeApp;
  let owner: string;
  let calm: Credentials;
  let calmTriggers = 0;

  beforeAll(async () => {
    app = await startIntakeApp(mode);
    owner = await app.ownerToken();
    calm = await bootstrapOrg(app, unique("calm").toLowerCase().slice(0, 30));
    // The large-body thread starts at its first task; under tsx, on a loaded machine, that takes
    // seconds, which the hostile previews below would otherwise wait for behind the gateway's deadline.
    const warm = await app.call("POST", `/o/${OWNER.org}/custom-sources`, {
      token: owner,
      body: { name: unique("warm").toLowerCase(), rules: [{ name: "first", title: "body.parts[0]" }] },
    });
    expect(warm.status, JSON.stringify(warm.body)).toBe(201);
    const preview = await app.call("POST", `/o/${OWNER.org}/custom-sources/${warm.body.source.id}/preview`, { token: owner, body: { body: { parts: PARTS } } });
    expect(preview.body).toMatchObject({ matchedRule: "first" });
    // The calm organization's first trigger resolves its ingest token and warms its path: before
    // the hostile work, so that trigger's cold start does not outlast every hostile answer.
    const first = await postTrigger(app, calm.ingestToken, {
      title: "Latency high",
      alert_type: "error",
      alert_transition: "Triggered",
      alert_id: `calm-${calmTriggers++}`,
      event_id: unique("ev"),
    });
    expect(first.status).toBe(201);
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  /**
   * Runs `hostile` (already sent) to its end while another organization posts triggers one after
   * another; the order in which answers came: "calm" or "hostile".
   */
  async function whileHostile<T>(hostile: Promise<T>[]): Promise<{ answers: T[]; order: string[]; calmStatuses: number[] }> {
    const order: string[] = [];
    const calmStatuses: number[] = [];
    let pending = hostile.length;
    const answers = Promise.all(
      hostile.map((work) =>
        work.then((answer) => {
          order.push("hostile");
          pending--;
          return answer;
        }),
      ),
    );
    // At least one trigger, and then as long as hostile work is in flight.
    do {
      const res = await postTrigger(app, calm.ingestToken, {
        title: "Latency high",
        alert_type: "error",
        alert_transition: "Triggered",
        alert_id: `calm-${calmTriggers++}`,
        event_id: unique("ev"),
      });
      calmStatuses.push(res.status);
      order.push("calm");
    } while (pending > 0);
    return { answers: await answers, order, calmStatuses };
  }

  /** Whether a calm answer came before the last hostile one: answered while that work was in flight. */
  function answeredDuring(order: string[]): boolean {
    return order.indexOf("calm") < order.lastIndexOf("hostile");
  }

  it("answers a preview of about 1 MiB with hostile rules with its mapping error, and another organization's triggers meanwhile", async () => {
    const payload = { parts: PARTS };
    const sent = JSON.stringify({ body: payload });
    expect(Buffer.byteLength(sent)).toBeGreaterThan(LARGE_BODY_BYTES * 14);
    const created = await app.call("POST", `/o/${OWNER.org}/custom-sources`, {
      token: owner,
      body: {
        name: unique("preview").toLowerCase(),
        rules: [
          { name: "nested", when: HOSTILE.nested, title: "'never'" },
          { name: "split-join", title: HOSTILE.splitJoin },
        ],
      },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const path = `/o/${OWNER.org}/custom-sources/${created.body.source.id}/preview`;

    const saved = () => app.call("POST", path, { token: owner, raw: sent, headers: { "content-type": "application/json" } });
    // Rules given with the preview run on the thread too.
    const given = () =>
      app.call("POST", path, { token: owner, body: { body: payload, rules: [{ name: "matches", when: HOSTILE.matches, title: HOSTILE.splitJoin }] } });
    const { answers, order, calmStatuses } = await whileHostile([saved(), given(), saved(), given()]);

    expect(
      calmStatuses.every((status) => status === 201),
      JSON.stringify(calmStatuses),
    ).toBe(true);
    expect(answeredDuring(order), order.join(" ")).toBe(true);
    for (const res of answers) {
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.error).toMatch(STOPPED);
      expect(res.body.fields ?? undefined).toBeUndefined();
    }
    // A small payload is still previewed (on the event loop) with the same rules.
    const small = await app.call("POST", path, { token: owner, body: { body: { parts: ["ab"] }, rules: [{ name: "short", title: HOSTILE.splitJoin }] } });
    expect(small.body).toMatchObject({ matchedRule: "short", fields: { title: "A-B" } });
  });

  it("records a built-in alert of about 1 MiB whose hostile grouping override fails, with the source's own grouping, and another organization's triggers meanwhile", async () => {
    const ingest = (await app.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner })).body.token as string;
    const put = await app.call("PUT", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, {
      token: owner,
      body: { attachKey: `${HOSTILE.splitJoin} + string(${HOSTILE.nested}) + string(${HOSTILE.matches})` },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    try {
      const alertIds = [unique("huge"), unique("huge")];
      const alert = (alertId: string) => ({
        title: `Disk full ${"t".repeat(200_000)}`,
        alert_type: "error",
        alert_transition: "Triggered",
        alert_id: alertId,
        event_id: unique("ev"),
        parts: PARTS.slice(0, 12),
      });
      const raw = JSON.stringify(alert(alertIds[0]!));
      expect(Buffer.byteLength(raw)).toBeGreaterThan(LARGE_BODY_BYTES * 14);
      const { answers, order, calmStatuses } = await whileHostile(
        alertIds.flatMap((id) => [postTrigger(app, ingest, alert(id)), postTrigger(app, ingest, alert(id))]),
      );

      expect(
        calmStatuses.every((status) => status === 201),
        JSON.stringify(calmStatuses),
      ).toBe(true);
      expect(answeredDuring(order), order.join(" ")).toBe(true);
      for (const res of answers) expect([200, 201], JSON.stringify(res.body)).toContain(res.status);
      // The source's own grouping (its alert id): the two of each alert are one incident, and the two alerts are two.
      for (const pair of [answers.slice(0, 2), answers.slice(2)]) {
        expect(pair.map((res) => res.body.outcome).sort()).toEqual(["attached", "opened"]);
        expect(pair[0]!.body.incidentId).toBe(pair[1]!.body.incidentId);
        const incident = await getIncident(app, owner, pair[0]!.body.incidentId);
        expect(incident.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
      }
      expect(answers[0]!.body.incidentId).not.toBe(answers[2]!.body.incidentId);
    } finally {
      expect((await app.call("DELETE", `/o/${OWNER.org}/grouping-overrides/metrics-monitor`, { token: owner })).status).toBe(204);
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  bootstrapOrg,
  type Credentials,
  issueCredentials,
  listIncidents,
  MODES,
  postTrigger,
  startIntakeApp,
  unique,
  type Answer,
  type IntakeApp,
} from "./triggers-kit.js";

/**
 * Each organization's budget of bodies over 64 KiB (INTAKE_LARGE_BODY_BYTES_PER_SECOND,
 * services/intake/large-body-budget.ts): each large body waits its turn before it is parsed, evenly
 * spaced at the budget's rate, and one whose turn is past the wait is refused with Retry-After and
 * nothing recorded. Another organization's large bodies, and the same organization's ordinary
 * alerts, never wait behind it. Here the budget is 1 MiB a second and the wait 4 s.
 */

const BUDGET = 1024 * 1024;
const WAIT_MS = 4_000;
/** Large bodies sent together: their turns spread over about 3.3 s, within the wait. */
const PACED = 12;
/** Large bodies of 500 KiB sent together to meet a refusal. */
const SENT_AT_ONCE = 24;

/** A metrics-monitor alert of about `bytes` bytes. */
function largeAlert(tag: string, id: string, bytes: number) {
  return { title: `Disk full ${tag}`, alert_type: "error", alert_transition: "Triggered", alert_id: id, event_id: unique("ev"), padding: "x".repeat(bytes) };
}

describe.each(MODES)("the large-body budget of an organization (%s)", (mode) => {
  let app: IntakeApp;
  let flooding: Credentials;
  let other: Credentials;
  let owner: string;

  beforeAll(async () => {
    // One intake process: the budget is each process's own.
    app = await startIntakeApp(mode, {
      intakes: 1,
      env: { INTAKE_LARGE_BODY_BYTES_PER_SECOND: String(BUDGET), INTAKE_SHARE_WAIT_MS: String(WAIT_MS) },
    });
    owner = await app.ownerToken();
    flooding = await issueCredentials(app);
    other = await bootstrapOrg(app, unique("other").toLowerCase().slice(0, 30));
    // Once large bodies of both organizations are through, the thread that reads them is started
    // and each organization's first delivery is done: the tests compare turns, not cold starts
    // (a thread's start alone took over a second on a quiet machine).
    const warm = unique("warm");
    const warmed = await Promise.all([
      postTrigger(app, flooding.ingestToken, largeAlert(warm, `${warm}-flooding`, 300 * 1024)),
      postTrigger(app, other.ingestToken, largeAlert(warm, `${warm}-other`, 300 * 1024)),
    ]);
    expect(warmed.map((a) => a.status)).toEqual([201, 201]);
    // The flooding organization's next body is taken at once again.
    await new Promise((r) => setTimeout(r, (300 * 1024 * 1000) / BUDGET));
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  /** Sends `work` and notes, in `order`, `name` once it is answered. */
  function noted(order: string[], name: string, work: Promise<Answer>): Promise<Answer> {
    return work.then((answer) => {
      order.push(name);
      return answer;
    });
  }

  it("takes large bodies in turn at the budget's rate, without waiting another organization or an ordinary alert", async () => {
    const tag = unique("paced");
    const order: string[] = [];
    const started = performance.now();
    // 3.5 MiB at 1 MiB a second: the first at once, the last about 3.3 s later (within the wait),
    // so a loaded machine still answers the two sent after them before the last of them.
    const paced = Array.from({ length: PACED }, (_, i) =>
      noted(order, "paced", postTrigger(app, flooding.ingestToken, largeAlert(tag, `${tag}-${i}`, 300 * 1024))),
    );
    // Sent after all of them: never in their queue.
    await new Promise((r) => setTimeout(r, 100));
    const otherLarge = noted(order, "other-large", postTrigger(app, other.ingestToken, largeAlert(tag, `${tag}-other`, 300 * 1024)));
    const small = noted(order, "small", postTrigger(app, flooding.ingestToken, largeAlert(tag, `${tag}-small`, 1024)));
    const answers = await Promise.all(paced);
    const elapsed = performance.now() - started;

    expect(answers.map((a) => a.status)).toEqual(Array(PACED).fill(201));
    expect((await otherLarge).status).toBe(201);
    expect((await small).status).toBe(201);
    // Paced: the last of them waited for its turn (a lower bound, which load cannot shorten).
    expect(elapsed).toBeGreaterThanOrEqual((((PACED - 1) * 300 * 1024) / BUDGET) * 1000 - 150);
    expect(order.indexOf("other-large")).toBeLessThan(order.lastIndexOf("paced"));
    expect(order.indexOf("small")).toBeLessThan(order.lastIndexOf("paced"));
    const opened = (await listIncidents(app, owner)).filter((i) => i.title === `Disk full ${tag}`);
    expect(opened).toHaveLength(PACED + 1);
  });

  it("refuses a large body whose turn is past the wait with Retry-After and records nothing of it; the sender's retry is the delivery", async () => {
    const tag = unique("refused");
    // About 12 MiB at once: turns up to twelve seconds away, past the four-second wait however
    // slowly a loaded machine hands the bodies to intake (unless slower than 1.5 MiB a second).
    const sent = Array.from({ length: SENT_AT_ONCE }, (_, i) => postTrigger(app, flooding.ingestToken, largeAlert(tag, `${tag}-${i}`, 500 * 1024)));
    const answers = await Promise.all(sent);
    const refused = answers.flatMap((a, i) => (a.status === 201 ? [] : [i]));
    const taken = answers.length - refused.length;
    expect(taken).toBeGreaterThanOrEqual(3);
    expect(refused.length).toBeGreaterThanOrEqual(1);
    for (const i of refused) {
      // The shared route's "try again" answer, as for a full share.
      expect(answers[i]!.status).toBe(503);
      expect(Number(answers[i]!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(answers[i]!.body)).toContain("INTAKE_LARGE_BODY_BYTES_PER_SECOND");
    }
    const titled = async () => (await listIncidents(app, owner)).filter((i) => i.title === `Disk full ${tag}`);
    expect(await titled()).toHaveLength(taken);

    // A sender that honours Retry-After gets every one in: none lost, none doubled.
    let pending = refused;
    for (let round = 0; pending.length > 0 && round < 20; round++) {
      const wait = Math.max(...pending.map((i) => Number(answers[i]!.headers.get("retry-after"))));
      await new Promise((r) => setTimeout(r, wait * 1000));
      const retried = await Promise.all(pending.map((i) => postTrigger(app, flooding.ingestToken, largeAlert(tag, `${tag}-${i}`, 500 * 1024))));
      retried.forEach((answer, k) => {
        answers[pending[k]!] = answer;
      });
      pending = pending.filter((_, k) => retried[k]!.status !== 201);
    }
    expect(pending).toEqual([]);
    const all = await titled();
    expect(all).toHaveLength(SENT_AT_ONCE);
    expect(new Set(all.map((i) => i.id)).size).toBe(SENT_AT_ONCE);
  });

  it("reads a large built-in body on a thread with the same answers as on the event loop", async () => {
    const tag = unique("read");
    const valid = await postTrigger(app, flooding.ingestToken, largeAlert(tag, `${tag}-valid`, 200 * 1024));
    expect(valid.status).toBe(201);
    expect(valid.body.outcome).toBe("opened");
    // Not UTF-8: 400, whatever the route.
    const text = JSON.stringify(largeAlert(tag, `${tag}-bad`, 200 * 1024));
    const bytes = Buffer.concat([Buffer.from(text.slice(0, -2)), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    const invalid = await postTrigger(app, flooding.ingestToken, undefined, { raw: bytes });
    expect(invalid.status).toBe(400);
    expect(JSON.stringify(invalid.body)).toContain("not valid UTF-8");
    // Nested past the limit: 422 with the reason.
    let deep: unknown = "x".repeat(200 * 1024);
    for (let i = 0; i < 70; i++) deep = { d: deep };
    const nested = await postTrigger(app, flooding.ingestToken, { ...largeAlert(tag, `${tag}-deep`, 10), deep });
    expect(nested.status).toBe(422);
    expect(JSON.stringify(nested.body)).toContain("nested deeper than 64 levels");
    // Not JSON at all: 422.
    const notJson = await postTrigger(app, flooding.ingestToken, undefined, { raw: `{${"x".repeat(200 * 1024)}` });
    expect(notJson.status).toBe(422);
    expect(JSON.stringify(notJson.body)).toContain("not valid JSON");
  });
});

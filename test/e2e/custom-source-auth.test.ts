import { createHmac, randomBytes, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RECEIVER_FAILURES_PER_MINUTE } from "../../services/intake/receiver-secrets.js";
import { OWNER } from "../support/app.js";
import { bootstrapOrg, fixtureText, getIncident, type IntakeApp, MODES, startIntakeApp, unique } from "./triggers-kit.js";

/**
 * A custom source that checks its tool's own credential, over HTTP: the secret in a header the
 * source names (GitLab's X-Gitlab-Token), or an HMAC of the raw body (GitHub, Sentry, Standard
 * Webhooks). Each accepts the right proof and refuses a wrong, missing, stale or tampered one with
 * the one 401 every refused credential gets, counted per address like the others.
 */

const REFUSED = { error: "unauthorized: send the source's current credential as Authorization: Bearer <secret>" };

describe.each(MODES)("custom-source auth modes (%s)", (mode) => {
  let app: IntakeApp;
  let owner: string;
  let nextAddress = 0;

  beforeAll(async () => {
    // Behind a trusted proxy, so each delivery can come from an address of its own.
    app = await startIntakeApp(mode, { intakes: 2, env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
    owner = await app.ownerToken();
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  async function createSource(body: Record<string, unknown>): Promise<{ id: string; secret: string; source: any }> {
    const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, { token: owner, body });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { id: res.body.source.id, secret: res.body.credential.secret, source: res.body.source };
  }

  /** A delivery of `raw` bytes with these headers, from an address of its own unless one is given. */
  function post(id: string, raw: string, headers: Record<string, string>) {
    const address = `203.0.113.${nextAddress++ % 250}`;
    return app.call("POST", `/triggers/custom/${id}`, { raw, headers: { "content-type": "application/json", "x-forwarded-for": address, ...headers } });
  }

  const hmac = (algorithm: string, key: string | Buffer, content: string, encoding: "hex" | "base64") =>
    createHmac(algorithm, key).update(content, "utf8").digest(encoding);

  it("gitlab preset: takes the secret in X-Gitlab-Token, refuses a wrong or missing one, and keeps the header redacted", async () => {
    const gitlab = await createSource({ name: unique("gitlab").toLowerCase(), preset: "gitlab" });
    expect(gitlab.source.auth).toMatchObject({ secretHeader: "x-gitlab-token", secretInPath: false });
    const trigger = fixtureText("gitlab/trigger.json");
    const gitlabHeaders = { "x-gitlab-event": "Pipeline Hook", "user-agent": "GitLab/18.5.1", "x-gitlab-instance": "https://gitlab.example.com" };

    expect(await post(gitlab.id, trigger, { ...gitlabHeaders, "x-gitlab-token": "x".repeat(64) })).toMatchObject({ status: 401, body: REFUSED });
    expect(await post(gitlab.id, trigger, gitlabHeaders)).toMatchObject({ status: 401, body: REFUSED });
    // Another source's secret in this source's header.
    const other = await createSource({ name: unique("gitlab").toLowerCase(), preset: "gitlab" });
    expect(await post(gitlab.id, trigger, { ...gitlabHeaders, "x-gitlab-token": other.secret })).toMatchObject({ status: 401, body: REFUSED });

    const opened = await post(gitlab.id, trigger, { ...gitlabHeaders, "x-gitlab-token": gitlab.secret });
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body.outcome).toBe("opened");
    expect((await getIncident(app, owner, opened.body.incidentId)).title).toBe("Pipeline failed on payments/ledger@main");
    // Bearer still works for the same source.
    const repeat = await post(gitlab.id, fixtureText("gitlab/repeat.json"), { authorization: `Bearer ${gitlab.secret}` });
    expect(repeat.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });

    const payloads = await app.call("GET", `/o/${OWNER.org}/custom-sources/${gitlab.id}/payloads`, { token: owner });
    expect(JSON.stringify(payloads.body)).not.toContain(gitlab.secret);
    expect(payloads.body.payloads.some((p: any) => p.headers["x-gitlab-token"] === "[redacted]")).toBe(true);
  });

  it("github preset: a fixture signed and delivered as GitHub does opens the incident; a tampered, unsigned or wrongly signed one is refused", async () => {
    const github = await createSource({ name: unique("github").toLowerCase(), preset: "github" });
    expect(github.source.auth.signature).toMatchObject({ header: "x-hub-signature-256", algorithm: "sha256", prefix: "sha256=", encoding: "hex" });
    const body = fixtureText("github/trigger.json");
    const asGitHub = (raw: string, signature?: string) => ({
      "user-agent": "GitHub-Hookshot/a1b2c3d",
      "x-github-event": "workflow_run",
      "x-github-delivery": randomUUID(),
      "x-github-hook-id": "491022317",
      "x-github-hook-installation-target-type": "repository",
      "x-github-hook-installation-target-id": "522819225",
      ...(signature ? { "x-hub-signature-256": signature } : {}),
      "x-hub-signature": `sha1=${hmac("sha1", github.secret, raw, "hex")}`,
    });
    const signed = `sha256=${hmac("sha256", github.secret, body, "hex")}`;

    const tampered = body.replace('"failure"', '"success"');
    expect(tampered).not.toBe(body);
    expect(await post(github.id, tampered, asGitHub(tampered, signed))).toMatchObject({ status: 401, body: REFUSED });
    expect(await post(github.id, body, asGitHub(body))).toMatchObject({ status: 401, body: REFUSED });
    expect(await post(github.id, body, asGitHub(body, `sha256=${hmac("sha256", "not the secret at all", body, "hex")}`))).toMatchObject({ status: 401 });
    expect(await post(github.id, body, asGitHub(body, signed.replace("sha256=", "sha1=")))).toMatchObject({ status: 401 });
    expect(await post(github.id, body, asGitHub(body, "sha256=zz"))).toMatchObject({ status: 401 });

    const opened = await post(github.id, body, asGitHub(body, signed));
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body.outcome).toBe("opened");
    const incident = await getIncident(app, owner, opened.body.incidentId);
    expect(incident).toMatchObject({ title: "CI failed on acme/checkout@main", severity: "sev2", source: expect.stringContaining("github") });
    // Signatures are over the bytes as sent: the same JSON re-indented is another body.
    const reformatted = JSON.stringify(JSON.parse(body));
    expect(await post(github.id, reformatted, asGitHub(reformatted, signed))).toMatchObject({ status: 401 });
    const ping = fixtureText("github/ping.json");
    expect((await post(github.id, ping, asGitHub(ping, `sha256=${hmac("sha256", github.secret, ping, "hex")}`))).body.outcome).toBe("ignored");
  });

  it("Standard Webhooks: the sender's whsec_ secret, several signatures, id.timestamp.body; a stale or future timestamp is a replay", async () => {
    const secret = `whsec_${randomBytes(24).toString("base64")}`;
    const source = await createSource({
      name: unique("stdhooks").toLowerCase(),
      secret,
      rules: [{ title: "body.title", attachKey: "body.key", eventId: "headers['webhook-id']" }],
      auth: {
        signature: {
          header: "webhook-signature",
          prefix: "v1,",
          encoding: "base64",
          timestampHeader: "webhook-timestamp",
          toleranceSeconds: 300,
          signedContent: "id.timestamp.body",
          idHeader: "webhook-id",
        },
      },
    });
    expect(source.secret).toBe(secret);
    const key = Buffer.from(secret.slice("whsec_".length), "base64");
    const body = JSON.stringify({ title: "Queue backlog over 10k", key: "queue/orders" });
    const signedAt = (seconds: number, id: string, raw = body) => ({
      "webhook-id": id,
      "webhook-timestamp": String(seconds),
      // A retired secret's signature first, then the current one: either may match.
      "webhook-signature": `v1,${hmac("sha256", randomBytes(24), `${id}.${seconds}.${raw}`, "base64")} v1,${hmac("sha256", key, `${id}.${seconds}.${raw}`, "base64")}`,
    });
    const now = Math.floor(Date.now() / 1000);

    // Past the 300 s tolerance either way (by more than the second the clocks' rounding may take).
    expect(await post(source.id, body, signedAt(now - 302, "msg_stale"))).toMatchObject({ status: 401, body: REFUSED });
    expect(await post(source.id, body, signedAt(now + 302, "msg_future"))).toMatchObject({ status: 401, body: REFUSED });
    // The signature of one message id does not cover another.
    const headers = signedAt(now, "msg_2nYgE7zTq");
    expect(await post(source.id, body, { ...headers, "webhook-id": "msg_other" })).toMatchObject({ status: 401 });
    expect(await post(source.id, body, { ...headers, "webhook-timestamp": String(now - 1) })).toMatchObject({ status: 401 });
    const { "webhook-timestamp": _dropped, ...untimed } = headers;
    expect(await post(source.id, body, untimed)).toMatchObject({ status: 401 });
    expect(await post(source.id, `${body} `, headers)).toMatchObject({ status: 401 });

    const opened = await post(source.id, body, headers);
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body.outcome).toBe("opened");
    // The same message sent again within the tolerance is one delivery (its id is the event id).
    expect((await post(source.id, body, headers)).body).toMatchObject({ incidentId: opened.body.incidentId });
    // Within the tolerance, a sender whose clock is a minute ahead is taken.
    expect((await post(source.id, body, signedAt(now + 60, "msg_ahead"))).body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
  });

  it("Sentry: the integration's client secret given at creation checks sentry-hook-signature; rotation to a new secret is immediate on every replica", async () => {
    const clientSecret = randomBytes(32).toString("hex");
    const source = await createSource({
      name: unique("sentry").toLowerCase(),
      secret: clientSecret,
      rules: [{ title: "body.data.issue.title", attachKey: "body.data.issue.id" }],
      auth: { signature: { header: "sentry-hook-signature", algorithm: "sha256", encoding: "hex" } },
    });
    const body = JSON.stringify({
      action: "created",
      data: { issue: { id: "4921", title: "TypeError: cart is undefined" } },
      installation: { uuid: randomUUID() },
    });
    const sentryHeaders = (key: string) => ({
      "sentry-hook-resource": "issue",
      "sentry-hook-timestamp": String(Math.floor(Date.now() / 1000)),
      "sentry-hook-signature": hmac("sha256", key, body, "hex"),
      "request-id": randomUUID(),
    });
    // Enough deliveries that both intake replicas have the source cached before the rotation.
    for (let i = 0; i < 16; i++) expect((await post(source.id, body, sentryHeaders(clientSecret))).status).toBeOneOf([200, 201]);

    const rotatedSecret = randomBytes(32).toString("hex");
    const rotated = await app.call("POST", `/o/${OWNER.org}/custom-sources/${source.id}/credential`, { token: owner, body: { secret: rotatedSecret } });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    expect(rotated.body.secret).toBe(rotatedSecret);
    for (let i = 0; i < 16; i++) expect((await post(source.id, body, sentryHeaders(clientSecret))).status).toBe(401);
    for (let i = 0; i < 16; i++) expect((await post(source.id, body, sentryHeaders(rotatedSecret))).status).toBeOneOf([200, 201]);

    expect((await app.call("DELETE", `/o/${OWNER.org}/custom-sources/${source.id}/credential`, { token: owner })).status).toBe(204);
    expect((await post(source.id, body, sentryHeaders(rotatedSecret))).status).toBe(401);
  });

  it("counts wrong signatures per address with every other wrong credential: past the limit, 429", async () => {
    const github = await createSource({ name: unique("github").toLowerCase(), preset: "github" });
    const body = fixtureText("github/trigger.json");
    const address = "198.18.7.9";
    const wrong = { "x-forwarded-for": address, "x-hub-signature-256": `sha256=${"0".repeat(64)}` };
    // Failures are counted per minute: a minute that ends during the run starts the count again,
    // so the limit is reached within twice its number.
    const statuses: number[] = [];
    while (statuses.at(-1) !== 429 && statuses.length <= 2 * RECEIVER_FAILURES_PER_MINUTE) statuses.push((await post(github.id, body, wrong)).status);
    expect(statuses.at(-1)).toBe(429);
    expect(statuses.filter((s) => s === 401).length).toBeGreaterThanOrEqual(RECEIVER_FAILURES_PER_MINUTE);
    // The right signature from another address is still taken.
    const right = { "x-hub-signature-256": `sha256=${hmac("sha256", github.secret, body, "hex")}` };
    expect((await post(github.id, body, right)).status).toBe(201);
  });

  it("config as code: exports a source's header or signature, applies a file with them, and a second apply changes nothing", async () => {
    const org = unique("authcode").toLowerCase().slice(0, 30);
    const { owner: token } = await bootstrapOrg(app, org);
    expect((await app.call("POST", `/o/${org}/custom-sources`, { token, body: { name: "ci-github", preset: "github" } })).status).toBe(201);
    const exported = await app.call("GET", `/o/${org}/config`, { token });
    const yaml = exported.body.yaml as string;
    expect(yaml).toContain("header: x-hub-signature-256");
    expect(yaml).toContain("prefix: sha256=");
    const apply = (body: unknown) => app.call("POST", `/o/${org}/config`, { token, body });
    expect((await apply({ yaml })).body).toMatchObject({ changes: [], applied: false });

    const withGitlab = yaml.replace(
      "customSources:\n",
      "customSources:\n  - name: ci-gitlab\n    preset: gitlab\n    auth:\n      secretHeader: X-Gitlab-Token\n    rules:\n      - title: \"'pipeline'\"\n",
    );
    const applied = await apply({ yaml: withGitlab });
    expect(applied.body, JSON.stringify(applied.body)).toMatchObject({ applied: true, credentials: [{ name: "ci-gitlab" }] });
    const secret = applied.body.credentials[0].credential.secret as string;
    const gitlab = (await app.call("GET", `/o/${org}/custom-sources`, { token })).body.customSources.find((s: any) => s.name === "ci-gitlab");
    expect(gitlab.auth).toMatchObject({ secretHeader: "x-gitlab-token" });
    expect((await post(gitlab.id, "{}", { "x-gitlab-token": secret })).body.outcome).toBe("opened");
    expect((await apply({ yaml: withGitlab })).body).toMatchObject({ changes: [], applied: false });

    const badSignature = yaml.replace("header: x-hub-signature-256", "header: authorization");
    const refused = await apply({ yaml: badSignature });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatch(/ci-github.*the authorization header cannot carry/);
  });

  it("refuses auth options that cannot work, saying what to fix", async () => {
    const refused = async (auth: unknown, extra: Record<string, unknown> = {}) => {
      const res = await app.call("POST", `/o/${OWNER.org}/custom-sources`, {
        token: owner,
        body: { name: unique("bad").toLowerCase(), rules: [{ title: "'t'" }], auth, ...extra },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      return res.body.error as string;
    };
    expect(await refused({ secretHeader: "authorization" })).toMatch(/auth\.secretHeader: the authorization header cannot carry/);
    expect(await refused({ secretHeader: "x gitlab" })).toMatch(/is not a header name/);
    expect(await refused({ signature: { header: "x-sig", algorithm: "md5" } })).toMatch(/algorithm: "md5" is not one of sha1, sha256, sha512/);
    expect(await refused({ signature: { header: "x-sig", encoding: "base32" } })).toMatch(/encoding/);
    expect(await refused({ signature: { header: "webhook-signature", signedContent: "id.timestamp.body" } })).toMatch(/timestampHeader/);
    expect(await refused({ signature: { header: "x-sig", toleranceSeconds: 90000 } })).toMatch(/at most 86400/);
    expect(await refused(undefined, { secret: "short" })).toMatch(/16 to 256 printable characters/);
  });
});

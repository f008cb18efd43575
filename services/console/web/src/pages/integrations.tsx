import { useState } from "preact/hooks";
import { api, orgPath, type ConformanceReport, type RemoteSource } from "../api";
import { alertmanagerAuthorizationBlock, alertmanagerHeadersBlock, chatCurl, datadogPayload, heartbeatCurl } from "../snippets";
import { Ago, askConfirm, ErrorNotice, OnceSecret, PageHeading, Snippet, useAction, useLoad, useNow } from "../ui";

// Each credential issued here stays on screen until the person dismisses it, beside the others
// issued in this tab: issuing the alert-router secret after the ingest token must not hide the
// token, which is already live at the source and can never be shown again. They live in memory
// only (never in storage), so they survive moving between pages but not a reload.

export { datadogPayload, heartbeatCurl } from "../snippets";

type IssuedKind = "ingest" | "alertrouter" | "chat";
interface Issued {
  kind: IssuedKind;
  value: string;
  /** When it was issued, to tell two of the same session apart. */
  at: string;
}

const ISSUED_NAMES: Record<IssuedKind, string> = { ingest: "ingest token", alertrouter: "alert-router secret", chat: "chat secret" };
let issuedInTab: Issued[] = [];

function IssuedCredential(props: { issued: Issued; org: string; origin: string; onDismiss(): void }) {
  const { issued, origin } = props;
  const label = ISSUED_NAMES[issued.kind];
  return (
    <section class="issued" data-issued={issued.kind} aria-labelledby={`issued-${issued.kind}-heading`}>
      <div class="issued-head">
        <h3 id={`issued-${issued.kind}-heading`}>
          New {label} <span class="muted">(issued {new Date(issued.at).toLocaleTimeString()})</span>
        </h3>
        <button type="button" class="secondary small" onClick={props.onDismiss} aria-label={`Dismiss the ${label}`}>
          Dismiss
        </button>
      </div>
      <OnceSecret id={`issued-${issued.kind}`} label={label[0]!.toUpperCase() + label.slice(1)} value={issued.value} />
      {issued.kind === "ingest" ? (
        <>
          <p>
            Metrics monitor (Datadog webhooks integration): URL <code>{`${origin}/triggers`}</code>, custom headers and payload below. A <code>service:</code>{" "}
            tag names the affected service.
          </p>
          <Snippet
            id="snippet-datadog-headers"
            title="Datadog webhook: custom headers"
            text={JSON.stringify({ Authorization: `Bearer ${issued.value}` }, null, 2)}
          />
          <Snippet id="snippet-datadog-body" title="Datadog webhook: payload" text={datadogPayload()} />
          <Snippet id="snippet-heartbeat" title="Heartbeat ping (end of your job)" text={heartbeatCurl(origin, props.org, issued.value)} />
        </>
      ) : null}
      {issued.kind === "alertrouter" ? (
        <>
          <Snippet
            id="snippet-alertmanager-authorization"
            title="Alertmanager (any version, 0.25 included): receiver with authorization"
            text={alertmanagerAuthorizationBlock(origin, issued.value)}
          />
          <Snippet
            id="snippet-alertmanager"
            title="Alertmanager (0.28.0 or later): receiver with http_headers"
            text={alertmanagerHeadersBlock(origin, issued.value)}
          />
        </>
      ) : null}
      {issued.kind === "chat" ? <Snippet id="snippet-chat" title="Chat workflow: the call it makes" text={chatCurl(origin, props.org, issued.value)} /> : null}
    </section>
  );
}

function Credentials(props: { org: string }) {
  const origin = location.origin;
  const [issued, setIssuedState] = useState<Issued[]>(issuedInTab);
  const action = useAction();
  const setIssued = (next: Issued[]) => {
    issuedInTab = next;
    setIssuedState(next);
  };

  async function issue(kind: IssuedKind) {
    const ok = await askConfirm({
      title: `Issue a new ${ISSUED_NAMES[kind]}?`,
      message: "It replaces the current one at once; senders still using the old one are refused.",
      confirmLabel: "Issue",
    });
    if (!ok) return;
    await action.run(async () => {
      const value =
        kind === "ingest"
          ? (await api<{ token: string }>("POST", orgPath("/triggers/ingest-token"))).token
          : (await api<{ secret: string }>("POST", orgPath(kind === "chat" ? "/triggers/chat-secret" : "/triggers/alertrouter-secret"))).secret;
      // A second one of the same kind replaces the first, which the service no longer accepts.
      setIssued([...issuedInTab.filter((i) => i.kind !== kind), { kind, value, at: new Date().toISOString() }]);
    });
  }

  return (
    <section aria-labelledby="credentials-heading" class="card">
      <h2 id="credentials-heading">Trigger credentials</h2>
      <p class="muted">
        Each is 64 hexadecimal characters, shown once, and replaces the previous one at once. The ingest token serves every monitor on{" "}
        <code>POST /triggers</code> and every heartbeat ping. What you issue stays here until you dismiss it.
      </p>
      <div class="actions">
        <button type="button" onClick={() => issue("ingest")} disabled={action.busy}>
          Issue ingest token
        </button>
        <button type="button" onClick={() => issue("alertrouter")} disabled={action.busy}>
          Issue alert-router secret
        </button>
        <button type="button" onClick={() => issue("chat")} disabled={action.busy}>
          Issue chat secret
        </button>
      </div>
      <ErrorNotice error={action.error} />
      <div aria-live="polite">
        {issued.map((i) => (
          <IssuedCredential key={i.kind} issued={i} org={props.org} origin={origin} onDismiss={() => setIssued(issuedInTab.filter((x) => x !== i))} />
        ))}
      </div>
    </section>
  );
}

function ChatWebhook() {
  const connection = useLoad(() => api<{ name: string; connected: boolean }>("GET", orgPath("/integrations/chatwebhook/connections/default")), []);
  const [url, setUrl] = useState("");
  const [test, setTest] = useState<{ ok: boolean; error: string | null } | undefined>(undefined);
  const action = useAction();
  const path = orgPath("/integrations/chatwebhook/connections/default");

  async function save(event: Event) {
    event.preventDefault();
    await action.run(async () => {
      await api("PUT", path, { webhookUrl: url.trim() });
      setUrl("");
      setTest(undefined);
      connection.reload();
    });
  }

  async function runTest() {
    setTest(undefined);
    await action.run(async () => setTest(await api<{ ok: boolean; error: string | null }>("POST", `${path}/test`)));
  }

  async function remove() {
    const ok = await askConfirm({
      title: "Remove the chat-webhook connection?",
      message: "Approved updates then have nowhere to go until a new one is saved.",
      confirmLabel: "Remove",
      danger: true,
    });
    if (!ok) return;
    await action.run(async () => {
      await api("DELETE", path);
      setTest(undefined);
      connection.reload();
    });
  }

  const connected = connection.data?.connected ?? false;
  return (
    <section aria-labelledby="chatwebhook-heading" class="card">
      <h2 id="chatwebhook-heading">Chat webhook</h2>
      <p>
        Status:{" "}
        <strong class={connected ? "ok-text" : "muted"} id="chatwebhook-status">
          {connection.loading ? "checking…" : connected ? "connected" : "not connected"}
        </strong>
      </p>
      <p class="muted">The incoming-webhook URL of your team-chat channel. It is a secret: it is stored encrypted and never shown again.</p>
      <form onSubmit={save} class="inline-form">
        <label for="chatwebhook-url">{connected ? "Replace the webhook URL" : "Webhook URL"}</label>
        <div class="secret-row">
          <input
            id="chatwebhook-url"
            type="password"
            inputMode="url"
            autoComplete="off"
            spellcheck={false}
            placeholder="https://…"
            required
            value={url}
            onInput={(e) => setUrl(e.currentTarget.value)}
          />
          <button type="submit" disabled={action.busy || !url.trim()}>
            Save
          </button>
        </div>
      </form>
      <div class="actions">
        <button type="button" class="secondary" onClick={runTest} disabled={action.busy || !connected}>
          Test connection
        </button>
        <button type="button" class="danger" onClick={remove} disabled={action.busy || !connected}>
          Remove
        </button>
      </div>
      <ErrorNotice error={action.error || connection.error} />
      {test ? (
        <p class={`notice ${test.ok ? "notice-ok" : "notice-error"}`} role="status" id="chatwebhook-test-result">
          {test.ok ? "Test message posted: check the channel." : `Test failed: ${test.error ?? "the channel refused the post"}`}
        </p>
      ) : null}
    </section>
  );
}

function EgressSwitch() {
  const egress = useLoad(() => api<{ enabled: boolean }>("GET", orgPath("/oncall/egress")), []);
  const action = useAction();
  const enabled = egress.data?.enabled ?? false;

  async function toggle(next: boolean) {
    if (
      next &&
      !(await askConfirm({
        title: "Switch real egress on?",
        message: "From now on every approved update you send is posted to the real chat channel.",
        confirmLabel: "Switch on",
      }))
    )
      return;
    await action.run(async () => {
      await api("PUT", orgPath("/oncall/egress"), { enabled: next });
      egress.reload();
    });
  }

  return (
    <section aria-labelledby="egress-heading" class="card">
      <h2 id="egress-heading">Real egress</h2>
      <p class="notice notice-warning" id="egress-warning">
        <strong>Warning:</strong> while real egress is on, every approved update that is sent is posted to the real chat channel, for everyone in it to read; a
        post cannot be edited or taken back. While it is off (the default), sent updates are recorded in the room as simulated and delivered nowhere. Test
        connection posts in both cases.
      </p>
      <div class="switch-row">
        <input
          id="egress-switch"
          type="checkbox"
          role="switch"
          checked={enabled}
          aria-checked={enabled}
          disabled={egress.loading || action.busy}
          aria-describedby="egress-warning"
          onChange={(e) => toggle(e.currentTarget.checked)}
        />
        <label for="egress-switch">{enabled ? "Real egress is on" : "Real egress is off"}</label>
      </div>
      <ErrorNotice error={action.error || egress.error} />
    </section>
  );
}

function Report(props: { report: ConformanceReport; name: string }) {
  return (
    <div class="report">
      <p class={`notice ${props.report.ok ? "notice-ok" : "notice-error"}`} role="status">
        {props.report.ok
          ? `Connected: every check passed (protocol version ${props.report.protocolVersion}).`
          : `Not connected: ${props.report.checks.filter((c) => !c.ok).length} of ${props.report.checks.length} checks failed.`}
      </p>
      <table class="list checks">
        <caption class="sr-only">{`Conformance report of ${props.name}`}</caption>
        <thead>
          <tr>
            <th scope="col">Check</th>
            <th scope="col">Result</th>
            <th scope="col">Detail</th>
          </tr>
        </thead>
        <tbody>
          {props.report.checks.map((check, i) => (
            <tr key={`${check.name}-${i}`}>
              <td data-label="Check">{check.name}</td>
              <td data-label="Result">
                <span class={`badge ${check.ok ? "pass" : "fail"}`}>{check.ok ? "pass" : "fail"}</span>
              </td>
              <td data-label="Detail">{check.detail || "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function RemoteSources() {
  const now = useNow();
  const sources = useLoad(() => api<{ remoteSources: RemoteSource[] }>("GET", orgPath("/remote-sources")).then((r) => r.remoteSources), []);
  const [reports, setReports] = useState<Record<string, ConformanceReport>>({});
  const [testing, setTesting] = useState("");
  const [form, setForm] = useState({ name: "", baseUrl: "", transport: "http", tenantRef: "", bearerToken: "" });
  const create = useAction();
  const test = useAction();
  const change = useAction();
  const [editing, setEditing] = useState("");

  async function remove(source: RemoteSource) {
    const ok = await askConfirm({
      title: `Delete the remote source ${source.name}?`,
      message: "Its connection and credential are deleted; incidents that name it keep their history, and its reads stop.",
      confirmLabel: "Delete",
      danger: true,
    });
    if (!ok) return;
    await change.run(async () => {
      await api("DELETE", orgPath(`/remote-sources/${encodeURIComponent(source.id)}`));
      sources.reload();
    });
  }

  async function submit(event: Event) {
    event.preventDefault();
    const done = await create.run(() =>
      api<RemoteSource>("POST", orgPath("/remote-sources"), {
        name: form.name.trim(),
        baseUrl: form.baseUrl.trim(),
        transport: form.transport,
        tenantRef: form.tenantRef.trim(),
        auth: form.bearerToken ? { bearerToken: form.bearerToken } : null,
      }),
    );
    if (done) {
      setForm({ name: "", baseUrl: "", transport: "http", tenantRef: "", bearerToken: "" });
      sources.reload();
    }
  }

  async function runTest(source: RemoteSource) {
    setTesting(source.id);
    const report = await test.run(() => api<ConformanceReport>("POST", orgPath(`/remote-sources/${encodeURIComponent(source.id)}/test`)));
    setTesting("");
    if (report) setReports((r) => ({ ...r, [source.id]: report }));
    sources.reload();
  }

  const field = (key: keyof typeof form) => ({
    value: form[key],
    onInput: (e: { currentTarget: { value: string } }) => setForm((f) => ({ ...f, [key]: e.currentTarget.value })),
  });

  const list = sources.data ?? [];
  return (
    <section aria-labelledby="remote-heading" class="card">
      <h2 id="remote-heading">Remote sources</h2>
      <p class="muted">
        Telemetry sources hosted by third parties. Test connection runs the conformance check; a source is marked connected only when every check passes.
      </p>
      <ErrorNotice error={sources.error || test.error || change.error} />
      {list.length === 0 ? (
        <p class="empty">No remote sources yet.</p>
      ) : (
        <ul class="sources">
          {list.map((source) => (
            <li key={source.id}>
              <div class="source-row">
                <div>
                  <strong>{source.name}</strong> <span class={`badge status-${source.status}`}>{source.status}</span>
                  <div class="muted mono">{`${source.transport} · ${source.baseUrl}`}</div>
                  <div class="muted">
                    Last tested <Ago at={source.lastTestedAt} now={now} />
                    {source.lastError ? <span class="error-text">{` · ${source.lastError}`}</span> : null}
                  </div>
                </div>
                <div class="row-actions">
                  <button type="button" class="secondary" onClick={() => runTest(source)} disabled={testing !== ""}>
                    {testing === source.id ? "Testing…" : "Test connection"}
                  </button>
                  <button
                    type="button"
                    class="secondary"
                    aria-expanded={editing === source.id}
                    aria-label={`Edit ${source.name}`}
                    onClick={() => setEditing(editing === source.id ? "" : source.id)}
                  >
                    Edit
                  </button>
                  <button type="button" class="danger" aria-label={`Delete ${source.name}`} onClick={() => remove(source)} disabled={change.busy}>
                    Delete
                  </button>
                </div>
              </div>
              {editing === source.id ? (
                <EditRemoteSource
                  source={source}
                  onDone={() => {
                    setEditing("");
                    sources.reload();
                  }}
                />
              ) : null}
              {reports[source.id] ? <Report report={reports[source.id]!} name={source.name} /> : null}
            </li>
          ))}
        </ul>
      )}
      <details class="add">
        <summary>Add a remote source</summary>
        <form onSubmit={submit} class="grid-2">
          <div>
            <label for="rs-name">Name</label>
            <input id="rs-name" required {...field("name")} />
          </div>
          <div>
            <label for="rs-url">Base URL</label>
            <input id="rs-url" type="url" required placeholder="https://source.example.com" {...field("baseUrl")} />
          </div>
          <div>
            <label for="rs-transport">Transport</label>
            <select id="rs-transport" value={form.transport} onChange={(e) => setForm((f) => ({ ...f, transport: e.currentTarget.value }))}>
              <option value="http">HTTP with JSON</option>
              <option value="grpc">gRPC</option>
            </select>
          </div>
          <div>
            <label for="rs-tenant">Tenant reference</label>
            <input id="rs-tenant" required {...field("tenantRef")} />
          </div>
          <div>
            <label for="rs-token">Bearer token</label>
            <input id="rs-token" type="password" autoComplete="off" {...field("bearerToken")} />
          </div>
          <div class="form-end">
            <ErrorNotice error={create.error} />
            <button type="submit" disabled={create.busy}>
              Add source
            </button>
          </div>
        </form>
      </details>
    </section>
  );
}

/** Changes a remote source's target or credential; a change sets it back to untested. */
function EditRemoteSource(props: { source: RemoteSource; onDone(): void }) {
  const { source } = props;
  const [form, setForm] = useState({ name: source.name, baseUrl: source.baseUrl, transport: source.transport, tenantRef: source.tenantRef, bearerToken: "" });
  const save = useAction();
  const id = `rs-edit-${source.id}`;
  const field = (key: keyof typeof form) => ({
    value: form[key],
    onInput: (e: { currentTarget: { value: string } }) => setForm((f) => ({ ...f, [key]: e.currentTarget.value })),
  });
  async function submit(event: Event) {
    event.preventDefault();
    const done = await save.run(() =>
      api<RemoteSource>("PATCH", orgPath(`/remote-sources/${encodeURIComponent(source.id)}`), {
        name: form.name.trim(),
        baseUrl: form.baseUrl.trim(),
        transport: form.transport,
        tenantRef: form.tenantRef.trim(),
        ...(form.bearerToken ? { auth: { bearerToken: form.bearerToken } } : {}),
      }),
    );
    if (done) props.onDone();
  }
  return (
    <form onSubmit={submit} class="grid-2 edit-source" aria-label={`Edit ${source.name}`}>
      <div>
        <label for={`${id}-name`}>Name</label>
        <input id={`${id}-name`} required {...field("name")} />
      </div>
      <div>
        <label for={`${id}-url`}>Base URL</label>
        <input id={`${id}-url`} type="url" required {...field("baseUrl")} />
      </div>
      <div>
        <label for={`${id}-transport`}>Transport</label>
        <select id={`${id}-transport`} value={form.transport} onChange={(e) => setForm((f) => ({ ...f, transport: e.currentTarget.value }))}>
          <option value="http">HTTP with JSON</option>
          <option value="grpc">gRPC</option>
        </select>
      </div>
      <div>
        <label for={`${id}-tenant`}>Tenant reference</label>
        <input id={`${id}-tenant`} required {...field("tenantRef")} />
      </div>
      <div>
        <label for={`${id}-token`}>New bearer token (empty keeps the current one)</label>
        <input id={`${id}-token`} type="password" autoComplete="off" {...field("bearerToken")} />
      </div>
      <div class="form-end">
        <ErrorNotice error={save.error} />
        <button type="submit" disabled={save.busy}>
          Save changes
        </button>
        <button type="button" class="secondary" onClick={props.onDone}>
          Cancel
        </button>
      </div>
    </form>
  );
}

interface Subscription {
  id: string;
  url: string;
  events: string[];
  description: string;
  state: string;
  disabledReason?: string | null;
  failingSince?: string | null;
  /** False while the organization's real egress is off: events are recorded as simulated, not sent. */
  egressEnabled?: boolean;
  notice?: string;
}

interface DeliveryAttempt {
  at: string;
  status: number;
  latencyMs: number;
  response: string;
  error?: string | null;
  outcome: string;
}

interface Delivery {
  webhookId: string;
  eventType: string;
  state: string;
  attemptCount: number;
  createdAt: string;
  attempts: DeliveryAttempt[];
}

const SUBSCRIPTION_EVENTS = [
  "incident.opened",
  "incident.repeat",
  "incident.recovery",
  "incident.no_data",
  "incident.severity_changed",
  "incident.acknowledged",
  "incident.owner_changed",
  "incident.note_added",
  "incident.resolved",
  "incident.archived",
  "heartbeat.silent",
  "heartbeat.resumed",
  "comms.update_sent",
  "incident.investigation_completed",
];

/** One subscription's delivery log, newest first, with a redeliver button per delivery. */
function DeliveryLog(props: { subscription: Subscription }) {
  const path = orgPath(`/subscriptions/${encodeURIComponent(props.subscription.id)}`);
  const log = useLoad(() => api<{ deliveries: Delivery[] }>("GET", `${path}/deliveries`).then((r) => r.deliveries), [path]);
  const redeliver = useAction();
  const list = log.data ?? [];
  return (
    <div class="delivery-log">
      <ErrorNotice error={log.error || redeliver.error} />
      {list.length === 0 ? (
        <p class="empty">No deliveries yet.</p>
      ) : (
        <table>
          <caption class="sr-only">{`Deliveries to ${props.subscription.description || props.subscription.url}`}</caption>
          <thead>
            <tr>
              <th scope="col">Event</th>
              <th scope="col">State</th>
              <th scope="col">Last attempt</th>
              <th scope="col">Answer</th>
              <th scope="col">Redeliver</th>
            </tr>
          </thead>
          <tbody>
            {list.map((d) => {
              const last = d.attempts[0];
              return (
                <tr key={d.webhookId}>
                  <td>
                    {d.eventType}
                    <div class="muted mono">{d.webhookId}</div>
                  </td>
                  <td>{`${d.state} · ${d.attemptCount} attempt${d.attemptCount === 1 ? "" : "s"}`}</td>
                  <td>{last ? `${last.status || "no answer"} in ${last.latencyMs} ms` : ""}</td>
                  <td class="mono">{last ? (last.error ?? last.response).slice(0, 200) : ""}</td>
                  <td>
                    <button
                      type="button"
                      class="secondary"
                      aria-label={`Redeliver ${d.webhookId}`}
                      disabled={redeliver.busy || d.eventType === "subscription.test"}
                      onClick={async () => {
                        await redeliver.run(() => api("POST", `${path}/deliveries/${encodeURIComponent(d.webhookId)}/redeliver`));
                        log.reload();
                      }}
                    >
                      Redeliver
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      <button type="button" class="secondary" onClick={() => log.reload()}>
        Refresh log
      </button>
    </div>
  );
}

/** Signed event subscriptions: the list with a banner on disabled ones, the test button, the log and the secret shown once. */
function Subscriptions() {
  const subs = useLoad(() => api<{ subscriptions: Subscription[] }>("GET", orgPath("/subscriptions")).then((r) => r.subscriptions), []);
  const [form, setForm] = useState({ url: "", description: "", events: ["incident.opened"] as string[] });
  const [secret, setSecret] = useState("");
  const [tests, setTests] = useState<Record<string, string>>({});
  const [open, setOpen] = useState("");
  const create = useAction();
  const test = useAction();

  async function submit(event: Event) {
    event.preventDefault();
    const done = await create.run(() =>
      api<{ id: string; secret: string }>("POST", orgPath("/subscriptions"), {
        url: form.url.trim(),
        description: form.description.trim(),
        events: form.events,
      }),
    );
    if (done) {
      setSecret(done.secret);
      setForm({ url: "", description: "", events: ["incident.opened"] });
      subs.reload();
    }
  }

  async function sendTest(sub: Subscription) {
    const result = await test.run(() =>
      api<{ ok: boolean; status: number; error?: string; notice?: string }>("POST", orgPath(`/subscriptions/${encodeURIComponent(sub.id)}/test`)),
    );
    if (result) {
      const outcome = result.ok ? `Test event delivered (HTTP ${result.status}).` : `Test failed: ${result.error ?? `HTTP ${result.status}`}`;
      setTests((t) => ({ ...t, [sub.id]: result.notice ? `${outcome} ${result.notice}` : outcome }));
    }
  }

  const list = subs.data ?? [];
  // The switch is the organization's: one notice for the whole list.
  const simulated = list.find((sub) => sub.egressEnabled === false);
  return (
    <section aria-labelledby="subscriptions-heading" class="card">
      <h2 id="subscriptions-heading">Subscriptions</h2>
      <p class="muted">Events signed to the Standard Webhooks specification and posted to your URL, retried for up to 24 hours.</p>
      {simulated ? (
        <p class="notice notice-warning" role="status" id="subscriptions-egress-off">
          {simulated.notice}
        </p>
      ) : null}
      <ErrorNotice error={subs.error || test.error} />
      {secret ? (
        <div class="secret">
          <label for="subscription-secret">Signing secret</label>
          <input id="subscription-secret" class="mono" readOnly value={secret} spellcheck={false} autoComplete="off" />
          <p class="hint">Shown once: give it to the receiver now. Rotate it from the API if it is lost.</p>
        </div>
      ) : null}
      {list.length === 0 ? (
        <p class="empty">No subscriptions yet.</p>
      ) : (
        <ul class="sources">
          {list.map((sub) => (
            <li key={sub.id}>
              {sub.state === "disabled" ? (
                <p class="banner error-text" role="alert" id={`subscription-banner-${sub.id}`}>
                  {`Disabled: ${sub.disabledReason ?? "by an admin"}. Events are not delivered until it is enabled again.`}
                </p>
              ) : null}
              <div class="source-row">
                <div>
                  <strong>{sub.description || sub.url}</strong> <span class={`badge status-${sub.state}`}>{sub.state}</span>
                  <div class="muted mono">{sub.url}</div>
                  <div class="muted">{sub.events.join(", ")}</div>
                  {tests[sub.id] ? <div class="subscription-test-result">{tests[sub.id]}</div> : null}
                </div>
                <div>
                  <button type="button" class="secondary" onClick={() => sendTest(sub)} disabled={test.busy}>
                    Send test event
                  </button>{" "}
                  <button type="button" class="secondary" onClick={() => setOpen(open === sub.id ? "" : sub.id)}>
                    {open === sub.id ? "Hide log" : "Delivery log"}
                  </button>
                </div>
              </div>
              {open === sub.id ? <DeliveryLog subscription={sub} /> : null}
            </li>
          ))}
        </ul>
      )}
      <details class="add">
        <summary>Add a subscription</summary>
        <form onSubmit={submit} class="grid-2">
          <div>
            <label for="sub-url">Receiver URL</label>
            <input
              id="sub-url"
              type="url"
              required
              placeholder="https://hooks.example.com/warroom"
              value={form.url}
              onInput={(e) => setForm((f) => ({ ...f, url: e.currentTarget.value }))}
            />
          </div>
          <div>
            <label for="sub-description">Description</label>
            <input id="sub-description" value={form.description} onInput={(e) => setForm((f) => ({ ...f, description: e.currentTarget.value }))} />
          </div>
          <fieldset>
            <legend>Events</legend>
            {SUBSCRIPTION_EVENTS.map((type) => (
              <label key={type} class="check">
                <input
                  type="checkbox"
                  checked={form.events.includes(type)}
                  onChange={(e) => {
                    const on = e.currentTarget.checked;
                    setForm((f) => ({ ...f, events: on ? [...f.events, type] : f.events.filter((t) => t !== type) }));
                  }}
                />{" "}
                {type}
              </label>
            ))}
          </fieldset>
          <div class="form-end">
            <ErrorNotice error={create.error} />
            <button type="submit" disabled={create.busy}>
              Add subscription
            </button>
          </div>
        </form>
      </details>
    </section>
  );
}

/**
 * The integrations page: the organization's credentials, the chat webhook connection and each
 * source's set-up.
 */
export function IntegrationsPage(props: { org: string }) {
  return (
    <>
      <PageHeading title="Integrations">Integrations</PageHeading>
      <p class="muted">
        Any other tool: <a href="/custom-sources">custom sources</a>.
      </p>
      <Credentials org={props.org} />
      <ChatWebhook />
      <EgressSwitch />
      <RemoteSources />
      <Subscriptions />
    </>
  );
}

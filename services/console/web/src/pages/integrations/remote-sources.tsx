import { useState } from "preact/hooks";
import { api, orgPath, type ConformanceReport, type RemoteSource } from "../../api";
import { Ago, askConfirm, ColumnHeads, ErrorNotice, useAction, useLoad, useNow } from "../../ui";

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
        <ColumnHeads columns={["Check", "Result", "Detail"]} />
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

export function RemoteSources() {
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

import { useState } from "preact/hooks";
import { api, orgPath, type Heartbeat } from "../api";
import { seconds } from "../format";
import { Ago, askConfirm, ErrorNotice, PageHeading, Snippet, Until, useAction, useLoad, useNow } from "../ui";
import { HeartbeatHistory, ScheduleSnippets } from "./heartbeat-history";
import { heartbeatCurl } from "../snippets";

/** "1 h + 5 min", or for a schedule "30 2 * * * (Europe/Berlin) + 5 min". */
function expectation(heartbeat: Heartbeat): string {
  const expected = heartbeat.schedule ? `${heartbeat.schedule} (${heartbeat.timezone ?? "UTC"})` : seconds(heartbeat.expectedIntervalSeconds);
  return `${expected} + ${seconds(heartbeat.graceSeconds)}`;
}

const NAME_PATTERN = "[a-z0-9][a-z0-9._\\-]{0,62}";

function SecondsField(props: { id: string; label: string; value: string; onInput(value: string): void; min?: number }) {
  const n = Number(props.value);
  return (
    <div>
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="number"
        inputMode="numeric"
        min={props.min ?? 1}
        step={1}
        required
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
        aria-describedby={`${props.id}-hint`}
      />
      <p class="hint" id={`${props.id}-hint`}>
        {Number.isInteger(n) && n > 0 ? `Seconds (${seconds(n)})` : "Seconds"}
      </p>
    </div>
  );
}

function EditRow(props: { heartbeat: Heartbeat; onDone(changed: boolean): void }) {
  const [every, setEvery] = useState(String(props.heartbeat.expectedIntervalSeconds));
  const [grace, setGrace] = useState(String(props.heartbeat.graceSeconds));
  const action = useAction();
  async function submit(event: Event) {
    event.preventDefault();
    const ok = await action.run(() =>
      api<Heartbeat>(
        "PATCH",
        orgPath(`/heartbeats/${encodeURIComponent(props.heartbeat.name)}`),
        // A scheduled heartbeat keeps its schedule (changed through the API); only grace is edited here.
        props.heartbeat.schedule ? { graceSeconds: Number(grace) } : { expectedIntervalSeconds: Number(every), graceSeconds: Number(grace) },
      ),
    );
    if (ok) props.onDone(true);
  }
  return (
    <form class="edit grid-3" onSubmit={submit} aria-label={`Edit ${props.heartbeat.name}`}>
      {props.heartbeat.schedule ? (
        <p class="hint">{`Schedule ${props.heartbeat.schedule} (${props.heartbeat.timezone ?? "UTC"})`}</p>
      ) : (
        <SecondsField id={`edit-interval-${props.heartbeat.name}`} label="Expected interval" value={every} onInput={setEvery} />
      )}
      <SecondsField id={`edit-grace-${props.heartbeat.name}`} label="Grace" value={grace} onInput={setGrace} />
      <div class="form-end">
        <ErrorNotice error={action.error} />
        <div class="actions">
          <button type="submit" disabled={action.busy}>
            Save
          </button>
          <button type="button" class="secondary" onClick={() => props.onDone(false)}>
            Cancel
          </button>
        </div>
      </div>
    </form>
  );
}

/**
 * The heartbeats page: the organization's heartbeats with their status and next expected ping, and
 * a form to register one.
 */
export function HeartbeatsPage(props: { org: string }) {
  const now = useNow(5_000);
  const list = useLoad(() => api<{ heartbeats: Heartbeat[] }>("GET", orgPath("/heartbeats")).then((r) => r.heartbeats), []);
  const [name, setName] = useState("");
  const [every, setEvery] = useState("3600");
  const [grace, setGrace] = useState("300");
  const [editing, setEditing] = useState("");
  const [showing, setShowing] = useState("");
  const [registered, setRegistered] = useState("");
  const register = useAction();
  const rowAction = useAction();

  async function submit(event: Event) {
    event.preventDefault();
    const created = await register.run(() =>
      api<Heartbeat>("POST", orgPath("/heartbeats"), { name: name.trim(), expectedIntervalSeconds: Number(every), graceSeconds: Number(grace) }),
    );
    if (created) {
      setRegistered(created.name);
      setName("");
      list.reload();
    }
  }

  async function remove(heartbeat: Heartbeat) {
    const ok = await askConfirm({
      title: `Delete the heartbeat ${heartbeat.name}?`,
      message: "Its pings are then refused and its silence no longer opens incidents.",
      confirmLabel: "Delete",
      danger: true,
    });
    if (!ok) return;
    await rowAction.run(async () => {
      await api("DELETE", orgPath(`/heartbeats/${encodeURIComponent(heartbeat.name)}`));
      list.reload();
    });
  }

  const heartbeats = list.data ?? [];
  return (
    <>
      <PageHeading title="Heartbeats">Heartbeats</PageHeading>
      <p class="muted">Jobs that ping when they run. When pings stop for longer than the interval plus the grace, an incident opens naming the heartbeat.</p>
      <ErrorNotice error={list.error || rowAction.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : heartbeats.length === 0 ? (
        <p class="empty">No heartbeats registered yet.</p>
      ) : (
        <table class="list heartbeats">
          <caption class="sr-only">Registered heartbeats</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Interval + grace</th>
              <th scope="col">Last seen</th>
              <th scope="col">Due</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {heartbeats.map((heartbeat) =>
              editing === heartbeat.name ? (
                <tr key={heartbeat.name}>
                  <td data-label="Name" class="mono">
                    {heartbeat.name}
                  </td>
                  <td colSpan={5}>
                    <EditRow
                      heartbeat={heartbeat}
                      onDone={(changed) => {
                        setEditing("");
                        if (changed) list.reload();
                      }}
                    />
                  </td>
                </tr>
              ) : (
                [
                  <tr key={heartbeat.name} data-heartbeat={heartbeat.name}>
                    <td data-label="Name" class="mono">
                      {heartbeat.name}
                    </td>
                    <td data-label="Interval + grace">{expectation(heartbeat)}</td>
                    <td data-label="Last seen">
                      <Ago at={heartbeat.lastSeenAt} now={now} />
                    </td>
                    <td data-label="Due">
                      <Until at={heartbeat.dueAt} now={now} />
                    </td>
                    <td data-label="Status">
                      <span class={`badge hb-${heartbeat.status}`}>{heartbeat.status}</span>
                    </td>
                    <td data-label="Actions" class="row-actions">
                      <button
                        type="button"
                        class="secondary"
                        onClick={() => setShowing(showing === heartbeat.name ? "" : heartbeat.name)}
                        aria-expanded={showing === heartbeat.name}
                        aria-label={`History of ${heartbeat.name}`}
                      >
                        History
                      </button>
                      <button type="button" class="secondary" onClick={() => setEditing(heartbeat.name)} aria-label={`Edit ${heartbeat.name}`}>
                        Edit
                      </button>
                      <button type="button" class="danger" onClick={() => remove(heartbeat)} disabled={rowAction.busy} aria-label={`Delete ${heartbeat.name}`}>
                        Delete
                      </button>
                    </td>
                  </tr>,
                  showing === heartbeat.name ? (
                    <tr key={`${heartbeat.name}-history`} class="history-row">
                      <td colSpan={6}>
                        <HeartbeatHistory heartbeat={heartbeat} />
                      </td>
                    </tr>
                  ) : null,
                ]
              ),
            )}
          </tbody>
        </table>
      )}

      <form class="card" onSubmit={submit} aria-labelledby="register-heading">
        <h2 id="register-heading">Register a heartbeat</h2>
        <div class="grid-3">
          <div>
            <label for="hb-name">Name</label>
            <input
              id="hb-name"
              required
              pattern={NAME_PATTERN}
              title="Lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
              aria-describedby="hb-name-hint"
            />
            <p class="hint" id="hb-name-hint">
              Fixed once created: renaming is delete and register again.
            </p>
          </div>
          <SecondsField id="hb-interval" label="Expected interval" value={every} onInput={setEvery} />
          <SecondsField id="hb-grace" label="Grace" value={grace} onInput={setGrace} />
        </div>
        <ErrorNotice error={register.error} />
        <button type="submit" disabled={register.busy}>
          Register
        </button>
        {registered ? (
          <div class="issued" role="status">
            <p>{`Registered ${registered}. Add the ping to the end of the job, with the organization's ingest token:`}</p>
            <Snippet id="snippet-registered-ping" title="Ping" text={heartbeatCurl(location.origin, props.org, "$WARROOM_INGEST_TOKEN", registered)} />
            <p>Or report the start, the exit status and the output of each run (a schedule and a run limit are set through the API):</p>
            <ScheduleSnippets org={props.org} name={registered} />
          </div>
        ) : null}
      </form>
    </>
  );
}

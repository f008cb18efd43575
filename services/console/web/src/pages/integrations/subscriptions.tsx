import { useState } from "preact/hooks";
import { EVENT_TYPES } from "../../../../../subscriptions/event-names";
import { api, type Delivery, orgPath, type Subscription } from "../../api";
import { ColumnHeads, ErrorNotice, useAction, useLoad } from "../../ui";

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
          <ColumnHeads columns={["Event", "State", "Last attempt", "Answer", "Redeliver"]} />
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
export function Subscriptions() {
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
            {EVENT_TYPES.map((type) => (
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

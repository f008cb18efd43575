import { useState } from "preact/hooks";
import { api, orgPath, type CommsMessage, type Incident } from "../api";
import { useLiveEvents } from "../live";
import { Link } from "../router";
import { ErrorNotice, useAction, useLoad } from "../ui";

const STATE_TEXT: Record<string, string> = {
  drafted: "Draft: waiting for approval",
  approved: "Approved: ready to send",
  sending: "Sending…",
  sent: "Sent to the chat channel",
  simulated: "Simulated: recorded in the room, not delivered",
  failed: "Failed: not delivered",
};

/**
 * What the chat channel will show: the same layout as the adaptive card the service posts (title
 * in the severity's colour, severity and state, the text, the room link written out as text).
 */
export function CardPreview(props: { incident: Incident; text: string; id?: string }) {
  const sev = props.incident.severity;
  return (
    <figure class="card-preview" id={props.id}>
      <figcaption class="sr-only">Card preview</figcaption>
      <div class={`card-title sev-text-${sev}`}>{props.incident.title || "Incident"}</div>
      <dl class="card-facts">
        <dt>Severity</dt>
        <dd>{sev.toUpperCase() || "unknown"}</dd>
        <dt>State</dt>
        <dd>{props.incident.state || "open"}</dd>
      </dl>
      <p class="card-text">{props.text || <span class="muted">The update text appears here.</span>}</p>
      <p class="card-link">
        War room: <span class="mono">{props.incident.workspaceUrl}</span>
      </p>
    </figure>
  );
}

/**
 * The war room's comms tab: drafts, approval and sending of the incident's chat updates, and
 * whether egress is on.
 */
export function CommsPanel(props: { incident: Incident; onChanged(): void }) {
  const base = orgPath(`/incidents/${encodeURIComponent(props.incident.id)}/comms/messages`);
  const messages = useLoad(() => api<{ messages: CommsMessage[] }>("GET", base).then((r) => r.messages), [base]);
  const egress = useLoad(() => api<{ enabled: boolean }>("GET", orgPath("/oncall/egress")), []);
  const [label, setLabel] = useState("");
  const [body, setBody] = useState("");
  const [results, setResults] = useState<Record<string, string>>({});
  const draft = useAction();
  const act = useAction();

  useLiveEvents((event) => {
    if (event.type === "ready" || (event.type === "update.sent" && event.data.incidentId === props.incident.id)) messages.reload();
  });

  const channel = label.trim() ? `chatwebhook:${label.trim()}` : "chatwebhook";

  async function submit(event: Event) {
    event.preventDefault();
    const created = await draft.run(() => api<{ messageId: string; version: string }>("POST", base, { channel, body }));
    if (created) {
      setBody("");
      messages.reload();
    }
  }

  async function approve(message: CommsMessage) {
    await act.run(async () => {
      await api("POST", `${base}/${encodeURIComponent(message.messageId)}/approve`, { version: message.version });
      messages.reload();
    });
  }

  async function send(message: CommsMessage) {
    await act.run(async () => {
      const res = await api<{ messageId: string; state: string }>("POST", `${base}/${encodeURIComponent(message.messageId)}/send`);
      setResults((r) => ({ ...r, [message.messageId]: res.state }));
      messages.reload();
      props.onChanged();
    });
  }

  const list = messages.data ?? [];
  return (
    <section aria-labelledby="comms-heading" class="comms">
      <h2 id="comms-heading" class="sr-only">
        Comms
      </h2>
      {egress.data ? (
        egress.data.enabled ? (
          <p class="notice notice-warning">Real egress is on: an approved update is posted to the chat channel when you send it.</p>
        ) : (
          <p class="notice">
            Real egress is off: a sent update is recorded in the room as <strong>simulated</strong> and delivered nowhere. An admin can switch it on under{" "}
            <Link href="/integrations">Integrations</Link>.
          </p>
        )
      ) : null}
      <form class="card draft" onSubmit={submit}>
        <h3>New update</h3>
        <p>
          Channel: <code class="mono">{channel}</code> <span class="muted">(the organization's chat webhook, which decides the actual channel)</span>
        </p>
        <label for="draft-label">Label on the timeline (optional)</label>
        <input id="draft-label" value={label} maxLength={64} onInput={(e) => setLabel(e.currentTarget.value)} />
        <label for="draft-body">Update text</label>
        <textarea id="draft-body" rows={4} required value={body} onInput={(e) => setBody(e.currentTarget.value)} />
        <p class="preview-label">Card preview</p>
        <CardPreview incident={props.incident} text={body} />
        <ErrorNotice error={draft.error} />
        <button type="submit" disabled={draft.busy || !body.trim()}>
          Save draft
        </button>
      </form>

      <h3>Updates</h3>
      <ErrorNotice error={messages.error || act.error} />
      {list.length === 0 ? (
        <p class="empty">No updates yet. Nothing leaves the service until a person approves it.</p>
      ) : (
        <ul class="messages">
          {list.map((message) => (
            <li key={message.messageId} class={`message message-${message.state}`} data-message-id={message.messageId}>
              <article aria-label={`Update ${message.state}`}>
                <div class="message-head">
                  <span class={`badge msg-state msg-${message.state}`}>{STATE_TEXT[message.state] ?? message.state}</span>
                  <span class="muted">{`${message.channel} · version ${message.version}`}</span>
                </div>
                <CardPreview incident={props.incident} text={message.body} />
                {message.error ? <p class="error-text">{message.error}</p> : null}
                {results[message.messageId] ? (
                  <p class="notice" role="status">
                    {results[message.messageId] === "sent"
                      ? "Sent: posted to the chat channel."
                      : results[message.messageId] === "simulated"
                        ? "Simulated: recorded in the room, not delivered (real egress is off)."
                        : `Finished as ${results[message.messageId]}.`}
                  </p>
                ) : null}
                <div class="actions">
                  {message.state === "drafted" ? (
                    <button type="button" onClick={() => approve(message)} disabled={act.busy}>
                      Approve
                    </button>
                  ) : null}
                  {message.state === "approved" ? (
                    <button type="button" onClick={() => send(message)} disabled={act.busy}>
                      Send
                    </button>
                  ) : null}
                </div>
              </article>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

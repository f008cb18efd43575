import { useState } from "preact/hooks";
import { api, loadSession, orgPath, type CommsMessage, type Incident } from "../api";
import { exact } from "../format";
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
  discarded: "Discarded: never sent",
};

/** Who did each step of an update, and when (with the time zone). */
function MessageTimes(props: { message: CommsMessage }) {
  const m = props.message;
  const steps = [
    m.draftedAt ? `Drafted by ${m.draftedBy} ${exact(m.draftedAt)}` : undefined,
    m.editedAt ? `Edited by ${m.editedBy} ${exact(m.editedAt)}` : undefined,
    m.approvedAt ? `Approved by ${m.approvedBy} ${exact(m.approvedAt)}` : undefined,
    m.sentAt ? `${m.state === "failed" ? "Failed" : m.state === "simulated" ? "Simulated" : "Sent"} by ${m.sentBy} ${exact(m.sentAt)}` : undefined,
  ].filter((step): step is string => step !== undefined);
  return (
    <ul class="message-times">
      {steps.map((step) => (
        <li key={step}>{step}</li>
      ))}
    </ul>
  );
}

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
  const settings = useLoad(() => api<{ requireSecondApprover: boolean }>("GET", orgPath("/comms/settings")), []);
  const [editing, setEditing] = useState<{ messageId: string; version: string; body: string } | null>(null);
  const me = loadSession()?.email;
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

  async function saveEdit(event: Event) {
    event.preventDefault();
    if (!editing) return;
    await act.run(async () => {
      await api("PATCH", `${base}/${encodeURIComponent(editing.messageId)}`, { version: editing.version, body: editing.body });
      setEditing(null);
      messages.reload();
    });
  }

  async function discard(message: CommsMessage) {
    await act.run(async () => {
      await api("DELETE", `${base}/${encodeURIComponent(message.messageId)}?version=${encodeURIComponent(message.version)}`);
      messages.reload();
    });
  }

  async function setSecondApprover(value: boolean) {
    await act.run(async () => {
      await api("PUT", orgPath("/comms/settings"), { requireSecondApprover: value });
      settings.reload();
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
      {settings.data ? (
        <p class="second-approver">
          <label>
            <input
              type="checkbox"
              checked={settings.data.requireSecondApprover}
              disabled={act.busy}
              onChange={(e) => void setSecondApprover(e.currentTarget.checked)}
            />{" "}
            A second person must approve each update (an admin changes this)
          </label>
        </p>
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
                {editing?.messageId === message.messageId ? (
                  <form class="edit-draft" onSubmit={saveEdit}>
                    <label for={`edit-${message.messageId}`}>Edit the update text</label>
                    <textarea
                      id={`edit-${message.messageId}`}
                      rows={4}
                      value={editing.body}
                      onInput={(e) => setEditing({ ...editing, body: e.currentTarget.value })}
                    />
                    <CardPreview incident={props.incident} text={editing.body} />
                    <div class="actions">
                      <button type="submit" disabled={act.busy || !editing.body.trim()}>
                        Save changes
                      </button>
                      <button type="button" class="secondary" onClick={() => setEditing(null)}>
                        Cancel
                      </button>
                    </div>
                  </form>
                ) : (
                  <CardPreview incident={props.incident} text={message.body} />
                )}
                <MessageTimes message={message} />
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
                  {message.state === "drafted" && editing?.messageId !== message.messageId ? (
                    <>
                      {settings.data?.requireSecondApprover && me !== undefined && (message.draftedBy === me || message.editedBy === me) ? (
                        <span class="muted">You wrote this update: a second person approves it.</span>
                      ) : (
                        <button type="button" onClick={() => approve(message)} disabled={act.busy}>
                          Approve
                        </button>
                      )}
                      <button
                        type="button"
                        class="secondary"
                        onClick={() => setEditing({ messageId: message.messageId, version: message.version, body: message.body })}
                      >
                        Edit
                      </button>
                      <button type="button" class="secondary" onClick={() => void discard(message)} disabled={act.busy}>
                        Discard
                      </button>
                    </>
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

import { useState } from "preact/hooks";
import { api, orgPath, type Incident, type Member } from "../api";
import { exact } from "../format";
import { ErrorNotice, useAction, useLoad } from "../ui";

/** The same limit the service holds a note to (a timeline entry's summary). */
const NOTE_MAX_CHARACTERS = 65536;

/**
 * What a responder does in the room: acknowledge the open incident, take or give it an owner, and
 * write a note on its timeline. Each change reloads the incident (`onChanged`).
 */
export function RespondControls(props: { incident: Incident; onChanged(): void }) {
  const { incident } = props;
  const action = useAction();
  const members = useLoad(() => api<{ members: Member[] }>("GET", orgPath("/members")), []);
  const [note, setNote] = useState("");
  const base = orgPath(`/incidents/${encodeURIComponent(incident.id)}`);

  const acknowledge = () =>
    action.run(async () => {
      await api<Incident>("POST", `${base}/acknowledge`);
      props.onChanged();
    });
  const setOwner = (ownerId: string) =>
    action.run(async () => {
      await api<Incident>("PUT", `${base}/owner`, { ownerId });
      props.onChanged();
    });
  const addNote = () =>
    action.run(async () => {
      await api("POST", `${base}/notes`, { text: note });
      setNote("");
      props.onChanged();
    });

  const owners = members.data?.members ?? [];
  return (
    <section class="respond" aria-label="Respond">
      <div class="actions">
        {incident.acknowledgedBy ? (
          <span class="badge acknowledged" title={exact(incident.acknowledgedAt)}>
            {`Acknowledged by ${incident.acknowledgedBy} at ${exact(incident.acknowledgedAt)}`}
          </span>
        ) : incident.state === "open" ? (
          <button type="button" onClick={() => void acknowledge()} disabled={action.busy}>
            Acknowledge
          </button>
        ) : null}
        {incident.state !== "archived" ? (
          <span class="owner-control">
            <label for="room-owner">Owner</label>
            <select
              id="room-owner"
              value={incident.ownerId ?? ""}
              disabled={action.busy || members.loading}
              onChange={(e) => void setOwner(e.currentTarget.value)}
            >
              <option value="">No owner</option>
              {incident.ownerId && !owners.some((m) => m.id === incident.ownerId) ? (
                <option value={incident.ownerId}>{incident.ownerEmail ?? incident.ownerId}</option>
              ) : null}
              {owners.map((m) => (
                <option key={m.id} value={m.id}>
                  {m.email}
                </option>
              ))}
            </select>
          </span>
        ) : (
          <span>{incident.ownerEmail ? `Owner ${incident.ownerEmail}` : null}</span>
        )}
      </div>
      <form
        class="note-form"
        onSubmit={(e) => {
          e.preventDefault();
          void addNote();
        }}
      >
        <label for="room-note">Note for the timeline</label>
        <textarea id="room-note" rows={2} maxLength={NOTE_MAX_CHARACTERS} value={note} onInput={(e) => setNote(e.currentTarget.value)} />
        <button type="submit" class="secondary" disabled={action.busy || note.trim() === ""}>
          Add note
        </button>
      </form>
      <ErrorNotice error={action.error || members.error} />
    </section>
  );
}

import { useState } from "preact/hooks";
import { api, orgPath } from "../api";
import { exact } from "../format";
import { ErrorNotice, PageHeading, useLoad, ListTable } from "../ui";

interface AuditEvent {
  kind: string;
  actor: string;
  at: string;
  data: Record<string, unknown> | null;
}

const PAGE = 50;

/** The organization's audit log for admins: newest first, filtered by kind and actor, in pages. */
export function AuditLogPage() {
  const [kind, setKind] = useState("");
  const [actor, setActor] = useState("");
  const [applied, setApplied] = useState({ kind: "", actor: "" });
  // The cursors of the pages before this one, so "Newer" goes back without a second cursor kind.
  const [cursors, setCursors] = useState<string[]>([""]);
  const cursor = cursors[cursors.length - 1]!;
  const page = useLoad(() => {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (applied.kind) query.set("kind", applied.kind);
    if (applied.actor) query.set("actor", applied.actor);
    if (cursor) query.set("cursor", cursor);
    return api<{ events: AuditEvent[]; nextCursor?: string }>("GET", orgPath(`/audit-events?${query}`));
  }, [applied.kind, applied.actor, cursor]);

  function apply(event: Event) {
    event.preventDefault();
    setApplied({ kind: kind.trim(), actor: actor.trim() });
    setCursors([""]);
  }

  const events = page.data?.events ?? [];
  return (
    <>
      <PageHeading title="Audit log">Audit log</PageHeading>
      <p class="muted">Who changed what, newest first. Admins and owners only.</p>
      <form class="card audit-filters" onSubmit={apply} aria-label="Filter the audit log">
        <div>
          <label for="audit-kind">Kind</label>
          <input id="audit-kind" list="audit-kinds" placeholder="member. or member.added" value={kind} onInput={(e) => setKind(e.currentTarget.value)} />
          <datalist id="audit-kinds">
            {["member.", "api_key.", "trigger.", "maintenance_window.", "remote_source.", "comms.", "receiver.auth_failed"].map((k) => (
              <option key={k} value={k} />
            ))}
          </datalist>
        </div>
        <div>
          <label for="audit-actor">Actor</label>
          <input id="audit-actor" placeholder="someone@example.com" value={actor} onInput={(e) => setActor(e.currentTarget.value)} />
        </div>
        <button type="submit">Filter</button>
      </form>
      <p class="hint">A kind ending in "." matches every kind it begins (member. matches member.added and member.removed).</p>
      <ErrorNotice error={page.error} />
      {page.loading && !page.data ? (
        <p class="muted">Loading…</p>
      ) : events.length === 0 ? (
        <p class="empty">No audit events{applied.kind || applied.actor ? " match these filters" : ""}.</p>
      ) : (
        <ListTable class="audit" caption="Audit events, newest first" columns={["When", "Kind", "Actor", "Details"]}>
          {events.map((e, i) => (
            <tr key={`${e.at}-${i}`} data-kind={e.kind}>
              <td data-label="When">
                <time dateTime={e.at}>{exact(e.at)}</time>
              </td>
              <td data-label="Kind" class="mono">
                {e.kind}
              </td>
              <td data-label="Actor">{e.actor}</td>
              <td data-label="Details" class="mono audit-data">
                {e.data && Object.keys(e.data).length ? JSON.stringify(e.data) : ""}
              </td>
            </tr>
          ))}
        </ListTable>
      )}
      <nav class="actions" aria-label="Audit log pages">
        <button type="button" class="secondary" disabled={cursors.length <= 1} onClick={() => setCursors((c) => c.slice(0, -1))}>
          Newer
        </button>
        <span class="muted">Page {cursors.length}</span>
        <button
          type="button"
          class="secondary"
          disabled={!page.data?.nextCursor}
          onClick={() => {
            const next = page.data?.nextCursor;
            if (next) setCursors((c) => [...c, next]);
          }}
        >
          Older
        </button>
      </nav>
    </>
  );
}

import { useState } from "preact/hooks";
import { api, orgPath, SOURCE_BADGES, type Entity, type MaintenanceWindow } from "../api";
import { exact, toLocalInput, until } from "../format";
import { ErrorNotice, PageHeading, useAction, useLoad, useNow } from "../ui";

function phase(mw: MaintenanceWindow, now: number): "upcoming" | "active" | "ended" {
  if (Date.parse(mw.endsAt ?? "") <= now) return "ended";
  return Date.parse(mw.startsAt ?? "") > now ? "upcoming" : "active";
}

function matchText(mw: MaintenanceWindow): string {
  const sources = mw.match?.sources ?? [];
  const entities = mw.match?.entities ?? [];
  const parts = [
    sources.length ? `sources ${sources.join(", ")}` : "every source",
    entities.length ? `entities ${entities.map((e) => `${e.kind}:${e.id}`).join(", ")}` : "every entity",
  ];
  return parts.join("; ");
}

/** "service:checkout, host:web-1" → entities; an entry without a kind is a service. */
function parseEntities(text: string): Entity[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const colon = s.indexOf(":");
      return colon > 0 ? { kind: s.slice(0, colon).trim(), id: s.slice(colon + 1).trim() } : { kind: "service", id: s };
    });
}

/** The maintenance page: the organization's windows and a form to create one. */
export function MaintenancePage() {
  const now = useNow(10_000);
  const list = useLoad(() => api<{ maintenanceWindows: MaintenanceWindow[] }>("GET", orgPath("/maintenance-windows")).then((r) => r.maintenanceWindows), []);
  const [reason, setReason] = useState("");
  const [startsAt, setStartsAt] = useState(() => toLocalInput(new Date()));
  const [endsAt, setEndsAt] = useState(() => toLocalInput(new Date(Date.now() + 3600_000)));
  const [sources, setSources] = useState<string[]>([]);
  const [entities, setEntities] = useState("");
  const create = useAction();
  const end = useAction();

  async function submit(event: Event) {
    event.preventDefault();
    const created = await create.run(() =>
      api<MaintenanceWindow>("POST", orgPath("/maintenance-windows"), {
        reason: reason.trim(),
        startsAt: new Date(startsAt).toISOString(),
        endsAt: new Date(endsAt).toISOString(),
        match: { sources, entities: parseEntities(entities) },
      }),
    );
    if (created) {
      setReason("");
      setSources([]);
      setEntities("");
      list.reload();
    }
  }

  async function remove(mw: MaintenanceWindow, verb: string) {
    if (!window.confirm(`${verb} the maintenance window "${mw.reason}"? Matching alerts then open incidents again.`)) return;
    await end.run(async () => {
      await api("DELETE", orgPath(`/maintenance-windows/${encodeURIComponent(mw.id)}`));
      list.reload();
    });
  }

  const windows = list.data ?? [];
  return (
    <>
      <PageHeading title="Maintenance windows">Maintenance windows</PageHeading>
      <p class="muted">While a window is active, a matching delivery is answered "suppressed" and opens nothing.</p>
      <ErrorNotice error={list.error || end.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : windows.length === 0 ? (
        <p class="empty">No maintenance windows.</p>
      ) : (
        <table class="list windows">
          <caption class="sr-only">Maintenance windows, latest start first</caption>
          <thead>
            <tr>
              <th scope="col">Reason</th>
              <th scope="col">When</th>
              <th scope="col">Covers</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {windows.map((w) => {
              const p = phase(w, now);
              const verb = p === "active" ? "End now" : p === "upcoming" ? "Cancel" : "Remove";
              return (
                <tr key={w.id} data-window={w.id}>
                  <td data-label="Reason">{w.reason || <span class="muted">no reason given</span>}</td>
                  <td data-label="When">
                    <time dateTime={w.startsAt ?? undefined}>{exact(w.startsAt)}</time> – <time dateTime={w.endsAt ?? undefined}>{exact(w.endsAt)}</time>
                  </td>
                  <td data-label="Covers">{matchText(w)}</td>
                  <td data-label="Status">
                    <span class={`badge mw-${p}`}>
                      {p === "active" ? `active, ends ${until(w.endsAt, now)}` : p === "upcoming" ? `starts ${until(w.startsAt, now)}` : "ended"}
                    </span>
                  </td>
                  <td data-label="Actions" class="row-actions">
                    <button
                      type="button"
                      class={p === "active" ? "danger" : "secondary"}
                      onClick={() => remove(w, verb)}
                      disabled={end.busy}
                      aria-label={`${verb}: ${w.reason}`}
                    >
                      {verb}
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}

      <form class="card" onSubmit={submit} aria-labelledby="mw-heading">
        <h2 id="mw-heading">Create a maintenance window</h2>
        <label for="mw-reason">Reason</label>
        <input id="mw-reason" required value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
        <div class="grid-2">
          <div>
            <label for="mw-start">Starts</label>
            <input id="mw-start" type="datetime-local" required value={startsAt} onInput={(e) => setStartsAt(e.currentTarget.value)} />
          </div>
          <div>
            <label for="mw-end">Ends</label>
            <input id="mw-end" type="datetime-local" required value={endsAt} onInput={(e) => setEndsAt(e.currentTarget.value)} />
          </div>
        </div>
        <fieldset>
          <legend>Sources (none checked: every source)</legend>
          <div class="checks-grid">
            {SOURCE_BADGES.map((badge) => (
              <label key={badge} class="check">
                <input
                  type="checkbox"
                  checked={sources.includes(badge)}
                  onChange={(e) => {
                    const checked = e.currentTarget.checked;
                    setSources((s) => (checked ? [...s, badge] : s.filter((x) => x !== badge)));
                  }}
                />
                {badge}
              </label>
            ))}
          </div>
        </fieldset>
        <label for="mw-entities">Entities (optional)</label>
        <input
          id="mw-entities"
          placeholder="service:checkout, service:payments"
          value={entities}
          onInput={(e) => setEntities(e.currentTarget.value)}
          aria-describedby="mw-entities-hint"
        />
        <p class="hint" id="mw-entities-hint">
          Comma-separated kind:id pairs; empty covers every entity.
        </p>
        <ErrorNotice error={create.error} />
        <button type="submit" disabled={create.busy}>
          Create window
        </button>
      </form>
    </>
  );
}

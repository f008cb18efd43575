import { useState } from "preact/hooks";
import { api, orgPath, SOURCE_BADGES, type Entity, type MaintenanceWindow } from "../api";
import { exact, toLocalInput, until } from "../format";
import { askConfirm, ErrorNotice, type Loaded, PageHeading, useAction, useLoad, useNow, ListTable } from "../ui";

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

/** One table of windows: the current ones or the past ones, each with its action. */
function WindowTable(props: {
  list: Loaded<MaintenanceWindow[]>;
  now: number;
  busy: boolean;
  labelledBy: string;
  empty: string;
  past?: boolean;
  onAct(mw: MaintenanceWindow, verb: string): void;
}) {
  const windows = props.list.data ?? [];
  if (props.list.loading && !props.list.data) return <p class="muted">Loading…</p>;
  if (windows.length === 0) return <p class="empty">{props.empty}</p>;
  return (
    <ListTable class="windows" labelledBy={props.labelledBy} columns={["Reason", "When", "Covers", "Status"]} actions>
      {windows.map((w) => {
        // The service's clock decides what is past; the page's clock only ticks the others on.
        const p = props.past ? "ended" : phase(w, props.now);
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
                {p === "active" ? `active, ends ${until(w.endsAt, props.now)}` : p === "upcoming" ? `starts ${until(w.startsAt, props.now)}` : "ended"}
              </span>
            </td>
            <td data-label="Actions" class="row-actions">
              <button
                type="button"
                class={p === "active" ? "danger" : "secondary"}
                onClick={() => props.onAct(w, verb)}
                disabled={props.busy}
                aria-label={`${verb}: ${w.reason}`}
              >
                {verb}
              </button>
            </td>
          </tr>
        );
      })}
    </ListTable>
  );
}

/** The maintenance page: the organization's windows and a form to create one. */
export function MaintenancePage() {
  const now = useNow(10_000);
  const current = useLoad(
    () => api<{ maintenanceWindows: MaintenanceWindow[] }>("GET", orgPath("/maintenance-windows?state=current")).then((r) => r.maintenanceWindows),
    [],
  );
  const past = useLoad(
    () => api<{ maintenanceWindows: MaintenanceWindow[] }>("GET", orgPath("/maintenance-windows?state=past")).then((r) => r.maintenanceWindows),
    [],
  );
  const reload = () => {
    current.reload();
    past.reload();
  };
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
      reload();
    }
  }

  /** Ends an active window now (it moves to past); cancels an upcoming one or removes a past one. */
  async function act(mw: MaintenanceWindow, verb: string) {
    const ending = verb === "End now";
    const ok = await askConfirm({
      title: `${verb}: the maintenance window "${mw.reason}"?`,
      message: ending
        ? "It ends at once and stays listed under past windows; matching alerts open incidents again."
        : verb === "Cancel"
          ? "It is deleted before it starts."
          : "It is deleted from the list; the audit log keeps its record.",
      confirmLabel: verb,
      danger: true,
    });
    if (!ok) return;
    await end.run(async () => {
      const path = `/maintenance-windows/${encodeURIComponent(mw.id)}`;
      if (ending) await api("POST", orgPath(`${path}/end`));
      else await api("DELETE", orgPath(path));
      reload();
    });
  }

  return (
    <>
      <PageHeading title="Maintenance windows">Maintenance windows</PageHeading>
      <p class="muted">While a window is active, a matching delivery is answered "suppressed" and opens nothing.</p>
      <ErrorNotice error={current.error || past.error || end.error} />
      <h2 id="mw-current">Active and upcoming</h2>
      <WindowTable list={current} now={now} busy={end.busy} onAct={act} labelledBy="mw-current" empty="No active or upcoming maintenance windows." />
      <h2 id="mw-past">Past</h2>
      <WindowTable list={past} now={now} busy={end.busy} onAct={act} labelledBy="mw-past" empty="No past maintenance windows." past />

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

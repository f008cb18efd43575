import { useRef, useState } from "preact/hooks";
import { api, orgPath, type Incident } from "../api";
import { useLiveEvents } from "../live";
import { Link } from "../router";
import { Ago, ErrorNotice, PageHeading, Severity, SourceBadge, StateBadge, useLoad, useNow } from "../ui";

const STATES = [
  { id: "open", label: "Open" },
  { id: "resolved", label: "Resolved" },
  { id: "archived", label: "Archived" },
] as const;

/** The room's path in the console: the same path as the incident's workspaceUrl. */
export function roomPath(incident: Pick<Incident, "id" | "workspaceUrl">, org: string): string {
  try {
    const url = new URL(incident.workspaceUrl);
    if (/^\/o\/[^/]+\/incidents\/[^/]+$/.test(url.pathname)) return url.pathname;
  } catch {
    // Falls back to the path built here.
  }
  return `/o/${encodeURIComponent(org)}/incidents/${encodeURIComponent(incident.id)}`;
}

/** The incidents list of one state, updated live, announcing new incidents to screen readers. */
export function IncidentsPage(props: { state: string; org: string }) {
  const state = STATES.some((s) => s.id === props.state) ? props.state : "open";
  const now = useNow();
  const known = useRef<{ state: string; ids: Set<string> } | undefined>(undefined);
  const [fresh, setFresh] = useState<Set<string>>(new Set());
  const [announcement, setAnnouncement] = useState("");

  const list = useLoad(async () => {
    const res = await api<{ incidents: Incident[] }>("GET", orgPath(`/incidents?state=${state}`));
    // Rows that arrived while the page was open are marked (and announced) once.
    const seen = known.current?.state === state ? known.current.ids : undefined;
    const added = seen ? res.incidents.filter((i) => !seen.has(i.id)) : [];
    known.current = { state, ids: new Set(res.incidents.map((i) => i.id)) };
    if (added.length > 0) {
      setFresh(new Set(added.map((i) => i.id)));
      setAnnouncement(added.length === 1 ? `New incident: ${added[0]!.title}` : `${added.length} new incidents`);
    }
    return res.incidents;
  }, [state]);

  useLiveEvents((event) => {
    if (event.type === "ready" || event.type.startsWith("incident.")) list.reload();
  });

  const incidents = list.data ?? [];
  return (
    <>
      <PageHeading title="Incidents">Incidents</PageHeading>
      <nav class="segmented" aria-label="Incident state">
        {STATES.map((s) => (
          <Link key={s.id} href={`/incidents?state=${s.id}`} aria-current={s.id === state ? "page" : undefined}>
            {s.label}
          </Link>
        ))}
      </nav>
      <p class="sr-only" role="status" aria-live="polite">
        {announcement}
      </p>
      <ErrorNotice error={list.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : incidents.length === 0 ? (
        <p class="empty">{state === "open" ? "No open incidents. New ones appear here as triggers arrive." : `No ${state} incidents.`}</p>
      ) : (
        <table class="list incidents">
          <caption class="sr-only">{`${STATES.find((s) => s.id === state)!.label} incidents, newest first`}</caption>
          <thead>
            <tr>
              <th scope="col">Incident</th>
              <th scope="col">Source</th>
              <th scope="col">Severity</th>
              <th scope="col">Entity</th>
              <th scope="col">Age</th>
            </tr>
          </thead>
          <tbody>
            {incidents.map((incident) => (
              <tr key={incident.id} class={fresh.has(incident.id) ? "fresh" : undefined} data-incident-id={incident.id}>
                <td data-label="Incident">
                  <Link href={roomPath(incident, props.org)} class="row-title">
                    {incident.title || "Untitled incident"}
                  </Link>
                  {incident.state !== "open" ? <StateBadge state={incident.state} /> : null}
                </td>
                <td data-label="Source">
                  <SourceBadge source={incident.source} />
                </td>
                <td data-label="Severity">
                  <Severity severity={incident.severity} />
                </td>
                <td data-label="Entity">
                  {incident.entity ? <span class="entity">{`${incident.entity.kind}:${incident.entity.id}`}</span> : <span class="muted">none</span>}
                </td>
                <td data-label="Age">
                  <Ago at={incident.openedAt} now={now} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

import type { ComponentChildren } from "preact";
import { useRef, useState } from "preact/hooks";
import { api, orgPath, SEVERITIES, SOURCE_BADGES, type Incident, type Member } from "../api";
import { duration, exact, timeZone } from "../format";
import { useLiveEvents } from "../live";
import { Link, navigate } from "../router";
import { useCorrelationGroups } from "./correlation-group";
import { type Action, BulkBar, RECOVERED_AT_SOURCE, type Selection } from "./bulk-actions";
import { Ago, ErrorNotice, PageHeading, Severity, SourceBadge, StateBadge, useAction, useLoad, useNow } from "../ui";

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

/** The list's filters and sort, as the URL holds them, so that a link shares a view. */
const FILTERS = ["severity", "source", "entityId", "acknowledged", "ownerId", "sort", "q"] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

function filtersOf(query: URLSearchParams): Filters {
  return Object.fromEntries(FILTERS.map((name) => [name, query.get(name) ?? ""])) as Filters;
}

function listQuery(state: string, filters: Filters): string {
  const query = new URLSearchParams({ state });
  for (const name of FILTERS) if (filters[name]) query.set(name, filters[name]);
  return query.toString();
}

/** Where this browser remembers whether the list's filters are folded. */
const FOLD_KEY = "warroom.incidentFilters";

/** Folded as the person last left them; without a choice, folded on a phone's width so the list comes first. */
function foldedAtStart(): boolean {
  try {
    const saved = localStorage.getItem(FOLD_KEY);
    if (saved === "folded" || saved === "open") return saved === "folded";
  } catch {
    // No storage (a locked-down browser): the default below.
  }
  return window.matchMedia("(max-width: 40rem)").matches;
}

function rememberFolded(folded: boolean): void {
  try {
    localStorage.setItem(FOLD_KEY, folded ? "folded" : "open");
  } catch {
    // Not remembered; the toggle still works for this page.
  }
}

/** The active filters and the sort in one line, e.g. "Severity SEV1 · Not acknowledged · newest first". */
function filterSummary(filters: Filters, members: Member[], sortLabel: string): string {
  const owner = filters.ownerId === "none" ? "No owner" : `Owner ${members.find((m) => m.id === filters.ownerId)?.email ?? filters.ownerId}`;
  const parts = [
    filters.q ? `Title contains “${filters.q}”` : "",
    filters.severity ? `Severity ${filters.severity.toUpperCase().replace(",", ", ")}` : "",
    filters.source ? `Source ${filters.source}` : "",
    filters.entityId ? `Entity ${filters.entityId}` : "",
    filters.acknowledged === "no" ? "Not acknowledged" : filters.acknowledged === "yes" ? "Acknowledged" : "",
    filters.ownerId ? owner : "",
  ].filter(Boolean);
  return [...(parts.length ? parts : ["No filters"]), sortLabel].join(" · ");
}

/** The incidents list of one state, filtered and sorted from the URL, updated live, announcing new incidents to screen readers. */
/** The filter form above the list: each change of a filter is a new URL, the title search on submit. */
function FilterForm(props: {
  hidden: boolean;
  filters: Filters;
  searchText: string;
  onSearchText(text: string): void;
  setFilter(name: (typeof FILTERS)[number], value: string): void;
  members: Member[];
  /** The link that clears the filters, null when none is set. */
  clearHref: string | null;
}) {
  const { filters, searchText, setFilter } = props;
  return (
    <form
      id="incident-filters"
      hidden={props.hidden}
      class="filters"
      aria-label="Filter incidents"
      onSubmit={(e) => {
        e.preventDefault();
        setFilter("q", searchText.trim());
      }}
    >
      <span>
        <label for="filter-q">Title contains</label>
        <input id="filter-q" type="search" value={searchText} onInput={(e) => props.onSearchText(e.currentTarget.value)} />
      </span>
      <span>
        <label for="filter-severity">Severity</label>
        <select id="filter-severity" value={filters.severity} onChange={(e) => setFilter("severity", e.currentTarget.value)}>
          <option value="">Any</option>
          {SEVERITIES.map((sev) => (
            <option key={sev} value={sev}>
              {sev.toUpperCase()}
            </option>
          ))}
          <option value="sev1,sev2">SEV1 and SEV2</option>
          {filters.severity && !SEVERITIES.includes(filters.severity) && filters.severity !== "sev1,sev2" ? (
            <option value={filters.severity}>{filters.severity.toUpperCase()}</option>
          ) : null}
        </select>
      </span>
      <span>
        <label for="filter-source">Source</label>
        <input
          id="filter-source"
          list="filter-source-badges"
          value={filters.source}
          placeholder="any"
          onChange={(e) => setFilter("source", e.currentTarget.value.trim())}
        />
        <datalist id="filter-source-badges">
          {SOURCE_BADGES.map((badge) => (
            <option key={badge} value={badge} />
          ))}
        </datalist>
      </span>
      <span>
        <label for="filter-entity">Entity id</label>
        <input id="filter-entity" value={filters.entityId} placeholder="any" onChange={(e) => setFilter("entityId", e.currentTarget.value.trim())} />
      </span>
      <span>
        <label for="filter-acknowledged">Acknowledged</label>
        <select id="filter-acknowledged" value={filters.acknowledged} onChange={(e) => setFilter("acknowledged", e.currentTarget.value)}>
          <option value="">Any</option>
          <option value="no">Not acknowledged</option>
          <option value="yes">Acknowledged</option>
        </select>
      </span>
      <span>
        <label for="filter-owner">Owner</label>
        <select id="filter-owner" value={filters.ownerId} onChange={(e) => setFilter("ownerId", e.currentTarget.value)}>
          <option value="">Anyone or no one</option>
          <option value="none">No owner</option>
          {props.members.map((m) => (
            <option key={m.id} value={m.id}>
              {m.email}
            </option>
          ))}
        </select>
      </span>
      <span>
        <label for="filter-sort">Sort</label>
        <select
          id="filter-sort"
          value={filters.sort || "newest"}
          onChange={(e) => setFilter("sort", e.currentTarget.value === "newest" ? "" : e.currentTarget.value)}
        >
          <option value="newest">Newest first</option>
          <option value="severity">Severity</option>
          <option value="activity">Latest activity</option>
        </select>
      </span>
      <button type="submit" class="secondary">
        Search
      </button>
      {props.clearHref ? <Link href={props.clearHref}>Clear filters</Link> : null}
    </form>
  );
}

/** One incident of the list, with its checkbox for bulk actions. */
function IncidentRow(props: {
  incident: Incident;
  org: string;
  now: number;
  fresh: boolean;
  checked: boolean;
  onToggle(): void;
  /** The correlation group's marker, when the incident belongs to one. */
  marker: ComponentChildren;
  resolvedList: boolean;
}) {
  const { incident, now, resolvedList } = props;
  return (
    <tr class={props.fresh ? "fresh" : undefined} data-incident-id={incident.id}>
      <td class="select">
        <input type="checkbox" aria-label={`Select ${incident.title || "Untitled incident"}`} checked={props.checked} onChange={props.onToggle} />
      </td>
      <td data-label="Incident">
        <Link href={roomPath(incident, props.org)} class="row-title">
          {incident.title || "Untitled incident"}
        </Link>
        {incident.state !== "open" ? <StateBadge state={incident.state} /> : null}
        {props.marker}
        {incident.state === "open" && incident.recoveredAtSource ? (
          <span class="badge recovered" title="The source sent a recovery after its last alert; resolve it when you agree">
            Recovered at source
          </span>
        ) : null}
      </td>
      <td data-label="Source">
        <SourceBadge source={incident.source} />
      </td>
      <td data-label="Severity">
        <Severity severity={incident.severity} />
      </td>
      <td data-label="Entity">
        {incident.entity ? (
          <span class="entity" title={`${incident.entity.kind}:${incident.entity.id}`}>{`${incident.entity.kind}:${incident.entity.id}`}</span>
        ) : (
          <span class="muted">none</span>
        )}
      </td>
      <td data-label="Repeats">{incident.repeatCount}</td>
      <td data-label="Last activity">
        <Ago at={incident.lastActivityAt} now={now} short />
      </td>
      <td data-label="Responder">
        {incident.acknowledgedBy ? (
          <span class="badge acknowledged" title={`Acknowledged ${exact(incident.acknowledgedAt)}`}>{`Ack ${incident.acknowledgedBy}`}</span>
        ) : incident.state === "open" ? (
          <span class="badge unacknowledged">Not acknowledged</span>
        ) : null}
        {incident.ownerEmail ? <span class="owner">{`Owner ${incident.ownerEmail}`}</span> : null}
      </td>
      <td data-label={resolvedList ? "Duration" : "Age"}>
        {resolvedList && incident.resolvedAt ? (
          <span title={`Opened ${exact(incident.openedAt)}, resolved ${exact(incident.resolvedAt)}`}>{duration(incident.openedAt, incident.resolvedAt)}</span>
        ) : (
          <Ago at={incident.openedAt} now={now} short />
        )}
      </td>
    </tr>
  );
}

/** The states to switch between, the button that folds the filters, and what they are while folded. */
function ListBar(props: { state: string; filters: Filters; folded: boolean; onFold(folded: boolean): void; summary: string; clearHref: string | null }) {
  const { state, filters, folded, summary } = props;
  return (
    <div class="list-bar">
      <nav class="segmented" aria-label="Incident state">
        {STATES.map((s) => (
          <Link key={s.id} href={`/incidents?${listQuery(s.id, filters)}`} aria-current={s.id === state ? "page" : undefined}>
            {s.label}
          </Link>
        ))}
      </nav>
      <button
        type="button"
        class="secondary small filter-toggle"
        aria-expanded={!folded}
        aria-controls="incident-filters"
        onClick={() => props.onFold(!folded)}
      >
        {folded ? "Show filters" : "Hide filters"}
      </button>
      {folded ? (
        <span class="filter-summary" data-testid="filter-summary" title={summary}>
          {summary}
        </span>
      ) : null}
      {folded && props.clearHref ? <Link href={props.clearHref}>Clear filters</Link> : null}
      <span class="muted zone">{`Times in ${timeZone()}`}</span>
    </div>
  );
}

/**
 * The incidents of one list query: the first page (reloaded on every incident event, with the rows
 * that arrived since the last load marked and announced), then the pages "Show more" adds.
 */
function useIncidentList(query: string) {
  const known = useRef<{ query: string; ids: Set<string> } | undefined>(undefined);
  const [fresh, setFresh] = useState<Set<string>>(new Set());
  const [announcement, setAnnouncement] = useState("");
  const [more, setMore] = useState<{ query: string; incidents: Incident[]; cursor: string | null } | null>(null);
  const paging = useAction();
  const list = useLoad(async () => {
    const res = await api<{ incidents: Incident[]; nextCursor: string | null }>("GET", orgPath(`/incidents?${query}`));
    // Rows that arrived while the page was open are marked (and announced) once.
    const seen = known.current?.query === query ? known.current.ids : undefined;
    const added = seen ? res.incidents.filter((i) => !seen.has(i.id)) : [];
    known.current = { query, ids: new Set(res.incidents.map((i) => i.id)) };
    if (added.length > 0) {
      setFresh(new Set(added.map((i) => i.id)));
      setAnnouncement(added.length === 1 ? `New incident: ${added[0]!.title}` : `${added.length} new incidents`);
    }
    return res;
  }, [query]);

  useLiveEvents((event) => {
    if (event.type === "ready" || event.type.startsWith("incident.")) list.reload();
  });

  const later = more && more.query === query ? more : null;
  const incidents = [...(list.data?.incidents ?? []), ...(later?.incidents ?? [])];
  const cursor = later ? later.cursor : (list.data?.nextCursor ?? null);
  const showMore = () =>
    paging.run(async () => {
      if (!cursor) return;
      const page = await api<{ incidents: Incident[]; nextCursor: string | null }>("GET", orgPath(`/incidents?${query}&cursor=${encodeURIComponent(cursor)}`));
      setMore({ query, incidents: [...(later?.incidents ?? []), ...page.incidents], cursor: page.nextCursor });
    });
  return { list, incidents, cursor, showMore, paging, fresh, announcement };
}

/** What an empty list says: why it is empty, and for the open list, when incidents appear. */
function emptyText(state: string, filtered: boolean): string {
  if (filtered) return "No incidents match these filters.";
  return state === "open" ? "No open incidents. New ones appear here as triggers arrive." : `No ${state} incidents.`;
}

export function IncidentsPage(props: { state: string; org: string; query?: URLSearchParams }) {
  const state = STATES.some((s) => s.id === props.state) ? props.state : "open";
  const filters = filtersOf(props.query ?? new URLSearchParams());
  const query = listQuery(state, filters);
  const now = useNow();
  const [search, setSearch] = useState<{ query: string; text: string } | null>(null);
  const [folded, setFolded] = useState(foldedAtStart);
  const [selected, setSelected] = useState<{ query: string; ids: Set<string>; allMatching: boolean; asked: Action | null } | null>(null);

  const members = useLoad(() => api<{ members: Member[] }>("GET", orgPath("/members")), []);
  const { list, incidents, cursor, showMore, paging, fresh, announcement } = useIncidentList(query);

  /** Changes one filter in the URL (replacing the history entry), which reloads the list. */
  function setFilter(name: (typeof FILTERS)[number], value: string) {
    navigate(`/incidents?${listQuery(state, { ...filters, [name]: value })}`, { replace: true });
  }

  const groups = useCorrelationGroups(incidents);
  const searchText = search && search.query === query ? search.text : filters.q;
  const filtered = FILTERS.some((name) => name !== "sort" && filters[name]);
  const resolvedList = state !== "open";
  // A selection belongs to the view it was made in: another filter starts with none.
  const picked = selected && selected.query === query ? selected : null;
  const listFilter = Object.fromEntries([["state", state], ...FILTERS.filter((name) => name !== "sort" && filters[name]).map((name) => [name, filters[name]])]);
  const selection: Selection | null = picked?.allMatching
    ? picked.asked
      ? RECOVERED_AT_SOURCE
      : { kind: "filter", filter: listFilter, label: "Every incident matching this filter selected" }
    : picked && picked.ids.size > 0
      ? { kind: "ids", ids: [...picked.ids] }
      : null;
  const toggle = (id: string) => {
    const ids = new Set(picked?.allMatching ? [] : picked?.ids);
    if (ids.has(id)) ids.delete(id);
    else ids.add(id);
    setSelected({ query, ids, allMatching: false, asked: null });
  };
  const matchingAll = picked?.allMatching === true && !picked.asked;
  const allOnPage = incidents.length > 0 && incidents.every((i) => matchingAll || picked?.ids.has(i.id));
  const titleOf = (id: string) => incidents.find((i) => i.id === id)?.title ?? id;
  const sortLabel = filters.sort === "severity" ? "most severe first" : filters.sort === "activity" ? "latest activity first" : "newest first";
  const clearHref = `/incidents?${listQuery(state, { ...filtersOf(new URLSearchParams()), sort: filters.sort })}`;
  const summary = filterSummary(filters, members.data?.members ?? [], sortLabel);

  return (
    <>
      <PageHeading title="Incidents">Incidents</PageHeading>
      <ListBar
        state={state}
        filters={filters}
        folded={folded}
        onFold={(next) => {
          setFolded(next);
          rememberFolded(next);
        }}
        summary={summary}
        clearHref={filtered ? clearHref : null}
      />
      <FilterForm
        hidden={folded}
        filters={filters}
        searchText={searchText}
        onSearchText={(text) => setSearch({ query, text })}
        setFilter={setFilter}
        members={members.data?.members ?? []}
        clearHref={filtered ? clearHref : null}
      />
      {state === "open" && incidents.some((i) => i.recoveredAtSource) ? (
        <p>
          <button type="button" class="secondary" onClick={() => setSelected({ query, ids: new Set(), allMatching: true, asked: "resolve" })}>
            Resolve all recovered at source
          </button>
        </p>
      ) : null}
      {allOnPage && cursor && !matchingAll ? (
        <p>
          <button type="button" class="link" onClick={() => setSelected({ query, ids: new Set(), allMatching: true, asked: null })}>
            Select all incidents matching this filter
          </button>
        </p>
      ) : null}
      <BulkBar
        selection={selection}
        asked={picked?.asked ?? null}
        members={members.data?.members ?? []}
        titleOf={titleOf}
        onClear={() => setSelected(null)}
        onDone={() => list.reload()}
      />
      <p class="sr-only" role="status" aria-live="polite">
        {announcement}
      </p>
      <ErrorNotice error={list.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : incidents.length === 0 ? (
        <p class="empty">{emptyText(state, filtered)}</p>
      ) : (
        <table class="list incidents">
          <caption class="sr-only">{`${STATES.find((s) => s.id === state)!.label} incidents, ${sortLabel}`}</caption>
          <thead>
            <tr>
              <th scope="col" class="select">
                <input
                  type="checkbox"
                  aria-label="Select every incident shown"
                  checked={allOnPage}
                  onChange={() => setSelected(allOnPage ? null : { query, ids: new Set(incidents.map((i) => i.id)), allMatching: false, asked: null })}
                />
              </th>
              <th scope="col">Incident</th>
              <th scope="col">Source</th>
              <th scope="col">Severity</th>
              <th scope="col">Entity</th>
              <th scope="col">Repeats</th>
              <th scope="col">Last activity</th>
              <th scope="col">Responder</th>
              <th scope="col">{resolvedList ? "Duration" : "Age"}</th>
            </tr>
          </thead>
          <tbody>
            {groups.visible.map((incident) => (
              <IncidentRow
                key={incident.id}
                incident={incident}
                org={props.org}
                now={now}
                fresh={fresh.has(incident.id)}
                checked={matchingAll || picked?.ids.has(incident.id) || false}
                onToggle={() => toggle(incident.id)}
                marker={groups.marker(incident)}
                resolvedList={resolvedList}
              />
            ))}
          </tbody>
        </table>
      )}
      {cursor ? (
        <p>
          <button type="button" onClick={() => void showMore()} disabled={paging.busy}>
            {paging.busy ? "Loading…" : "Show more incidents"}
          </button>
        </p>
      ) : null}
      <ErrorNotice error={paging.error} />
    </>
  );
}

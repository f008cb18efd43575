import { useState } from "preact/hooks";
import { api, orgPath, SEVERITIES, type Incident, type TimelineEntry } from "../api";
import { exact, safeHref } from "../format";
import { useLiveEvents } from "../live";
import { Link, navigate, useLocation } from "../router";
import { Ago, askConfirm, ErrorNotice, PageHeading, Severity, SourceBadge, StateBadge, Tabs, useAction, useLoad, useNow } from "../ui";
import { CommsPanel } from "./comms";
import { RelatedIncidents } from "./correlation-group";
import { NextEscalation } from "./escalation";
import { EvidencePanel } from "./evidence";
import { RespondControls } from "./respond";

const KIND_LABELS: Record<string, string> = {
  opened: "Opened",
  repeat: "Repeat",
  recovery: "Recovery",
  no_data: "No-data repeat",
  resumed: "Resumed",
  acknowledged: "Acknowledged",
  unacknowledged: "Not acknowledged",
  change: "Change",
  update_sent: "Update sent",
  update_simulated: "Update simulated",
  severity_changed: "Severity changed",
  owner_changed: "Owner changed",
  note: "Note",
  resolved: "Resolved",
  archived: "Archived",
};

function text(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** How an update entry was delivered: sent, simulated (egress off) or failed. */
function Delivery(props: { entry: TimelineEntry }) {
  const state = text(props.entry.data?.state) ?? (props.entry.kind === "update_simulated" ? "simulated" : "sent");
  const label = state === "simulated" ? "Simulated: recorded here, not delivered" : state === "failed" ? "Failed: not delivered" : "Sent to the chat channel";
  return <span class={`badge delivery delivery-${state === "simulated" ? "simulated" : state === "failed" ? "failed" : "sent"}`}>{label}</span>;
}

function Entry(props: { entry: TimelineEntry; first: boolean }) {
  const { entry } = props;
  const link = safeHref(entry.link);
  const isUpdate = entry.kind === "update_sent" || entry.kind === "update_simulated";
  const body = isUpdate ? text(entry.data?.body) : undefined;
  return (
    <li class={`entry entry-${entry.kind}`}>
      <div class="entry-head">
        <span class={`kind kind-${entry.kind}`}>{KIND_LABELS[entry.kind] ?? entry.kind}</span>
        {isUpdate ? <Delivery entry={entry} /> : null}
        <time dateTime={entry.at ?? undefined} title={exact(entry.at)}>
          {exact(entry.at)}
        </time>
      </div>
      {isUpdate && body !== undefined ? (
        <>
          <p class="entry-summary">{body}</p>
          <p class="entry-meta">
            {text(entry.data?.channel) ? <span>{`Channel ${text(entry.data?.channel)}`}</span> : null}
            {text(entry.data?.approvedBy) ? <span>{`Approved by ${text(entry.data?.approvedBy)}`}</span> : null}
            {text(entry.data?.error) ? <span class="error-text">{text(entry.data?.error)}</span> : null}
          </p>
        </>
      ) : entry.summary ? (
        <p class="entry-summary">{entry.summary}</p>
      ) : props.first ? (
        <p class="entry-summary muted">No summary was sent.</p>
      ) : null}
      {link || entry.alertRef || entry.eventId ? (
        <p class="entry-meta">
          {link ? (
            <a href={link} target="_blank" rel="noopener noreferrer">
              {props.first ? "Open in the source" : "Link"}
            </a>
          ) : entry.link ? (
            <span class="mono">{entry.link}</span>
          ) : null}
          {entry.alertRef ? <span>{`Alert ${entry.alertRef}`}</span> : null}
          {entry.eventId && !isUpdate ? <span class="mono">{`Event ${entry.eventId}`}</span> : null}
        </p>
      ) : null}
      {entry.data && Object.keys(entry.data).length > 0 ? (
        <details>
          <summary>Delivery data</summary>
          <pre class="mono">{JSON.stringify(entry.data, null, 2)}</pre>
        </details>
      ) : null}
    </li>
  );
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** The incident's first timeline page, and the later pages on request (`timelineNextCursor`). */
export function Timeline(props: { incident: Incident }) {
  const [later, setLater] = useState<{ id: string; entries: TimelineEntry[]; cursor: string | null } | null>(null);
  const loading = useAction();
  const mine = later && later.id === props.incident.id ? later : null;
  const entries = mine ? [...props.incident.timeline, ...mine.entries] : props.incident.timeline;
  const cursor = mine ? mine.cursor : (props.incident.timelineNextCursor ?? null);
  const readMore = () =>
    loading.run(async () => {
      if (!cursor) return;
      const page = await api<{ entries: TimelineEntry[]; nextCursor: string | null }>(
        "GET",
        orgPath(`/incidents/${encodeURIComponent(props.incident.id)}/timeline?cursor=${encodeURIComponent(cursor)}`),
      );
      setLater({ id: props.incident.id, entries: [...(mine?.entries ?? []), ...page.entries], cursor: page.nextCursor });
    });
  const counts = {
    repeats: entries.filter((e) => e.kind === "repeat").length,
    recoveries: entries.filter((e) => e.kind === "recovery").length,
    noData: entries.filter((e) => e.kind === "no_data").length,
    updates: entries.filter((e) => e.kind === "update_sent" || e.kind === "update_simulated").length,
  };
  return (
    <section aria-labelledby="timeline-heading">
      <h2 id="timeline-heading" class="sr-only">
        Timeline
      </h2>
      <p class="muted">
        {[
          count(entries.length, "entry", "entries"),
          count(counts.repeats, "repeat", "repeats"),
          count(counts.recoveries, "recovery", "recoveries"),
          count(counts.noData, "no-data repeat", "no-data repeats"),
          count(counts.updates, "update", "updates"),
        ].join(" · ")}
      </p>
      <ol class="timeline">
        {entries.map((entry, i) => (
          <Entry key={`${entry.at}-${i}`} entry={entry} first={i === 0} />
        ))}
      </ol>
      {cursor ? (
        <p>
          <button type="button" onClick={() => void readMore()} disabled={loading.busy}>
            {loading.busy ? "Loading…" : "Show later entries"}
          </button>
        </p>
      ) : null}
      {loading.error ? <ErrorNotice error={loading.error} /> : null}
    </section>
  );
}

/** One of the room's facts that is a moment (opened, resolved...), shown only when it happened. */
function WhenFact(props: { label: string; at: string | null | undefined; now: number }) {
  if (!props.at) return null;
  return (
    <div>
      <dt>{props.label}</dt>
      <dd>
        <Ago at={props.at} now={props.now} />
      </dd>
    </div>
  );
}

/** The war room of one incident: its details, actions, and the timeline and comms tabs. */
export function RoomPage(props: { id: string }) {
  const loc = useLocation();
  const tab = loc.query.get("tab") === "comms" ? "comms" : "timeline";
  const now = useNow();
  const incident = useLoad(() => api<Incident>("GET", orgPath(`/incidents/${encodeURIComponent(props.id)}`)), [props.id]);
  const action = useAction();

  useLiveEvents((event) => {
    if (event.type === "ready" || event.data.incidentId === props.id) incident.reload();
  });

  const current = incident.data;

  async function setSeverity(severity: string) {
    await action.run(async () => {
      await api<Incident>("PATCH", orgPath(`/incidents/${encodeURIComponent(props.id)}`), { severity });
      incident.reload();
    });
  }

  async function change(verb: "resolve" | "archive") {
    const ok = await askConfirm(
      verb === "resolve"
        ? { title: "Resolve this incident?", message: "The next matching alert opens a new incident.", confirmLabel: "Resolve" }
        : {
            title: "Archive this incident?",
            message: "It leaves the open and resolved lists; the next matching alert opens a new incident.",
            confirmLabel: "Archive",
          },
    );
    if (!ok) return;
    await action.run(async () => {
      await api<Incident>("POST", orgPath(`/incidents/${encodeURIComponent(props.id)}/${verb}`));
      incident.reload();
    });
  }

  if (!current) {
    return (
      <>
        <PageHeading title="Incident">Incident</PageHeading>
        <ErrorNotice error={incident.error} />
        {incident.loading ? <p class="muted">Loading…</p> : null}
        <p>
          <Link href="/incidents">Back to incidents</Link>
        </p>
      </>
    );
  }

  return (
    <>
      <p class="crumbs">
        <Link href={`/incidents?state=${current.state}`}>{`${current.state[0]!.toUpperCase()}${current.state.slice(1)} incidents`}</Link>
      </p>
      <header class="room-head">
        <PageHeading title={current.title || "Incident"}>{current.title || "Untitled incident"}</PageHeading>
        <div class="room-badges">
          <StateBadge state={current.state} />
          <SourceBadge source={current.source} />
          <Severity severity={current.severity} />
          {current.entity ? <span class="entity">{`${current.entity.kind}:${current.entity.id}`}</span> : null}
        </div>
        <dl class="facts">
          <WhenFact label="Opened" at={current.openedAt} now={now} />
          <NextEscalation incident={current} now={now} />
          <WhenFact label="Resolved" at={current.resolvedAt} now={now} />
          <WhenFact label="Archived" at={current.archivedAt} now={now} />
          {safeHref(current.runbookUrl) ? (
            <div>
              <dt>Runbook</dt>
              <dd>
                <a href={safeHref(current.runbookUrl)} target="_blank" rel="noopener noreferrer">
                  Open runbook
                </a>
              </dd>
            </div>
          ) : null}
        </dl>
        <div class="actions">
          {current.state !== "archived" ? (
            <span class="severity-control">
              <label for="room-severity">Severity</label>
              <select id="room-severity" value={current.severity} disabled={action.busy} onChange={(e) => void setSeverity(e.currentTarget.value)}>
                {SEVERITIES.map((sev) => (
                  <option key={sev} value={sev}>
                    {sev.toUpperCase()}
                  </option>
                ))}
              </select>
            </span>
          ) : null}
          {current.state === "open" ? (
            <button type="button" onClick={() => change("resolve")} disabled={action.busy}>
              Resolve
            </button>
          ) : null}
          {current.state !== "archived" ? (
            <button type="button" class="secondary" onClick={() => change("archive")} disabled={action.busy}>
              Archive
            </button>
          ) : null}
        </div>
        <ErrorNotice error={action.error || incident.error} />
        <RespondControls incident={current} onChanged={incident.reload} />
      </header>
      <RelatedIncidents incident={current} />
      <EvidencePanel incidentId={current.id} open={current.state === "open"} />
      <Tabs
        label="Room"
        tabs={[
          { id: "timeline", label: "Timeline" },
          { id: "comms", label: "Comms" },
        ]}
        selected={tab}
        onSelect={(id) => navigate(`${loc.path}${id === "comms" ? "?tab=comms" : ""}`, { replace: true })}
      >
        {tab === "comms" ? <CommsPanel incident={current} onChanged={incident.reload} /> : <Timeline incident={current} />}
      </Tabs>
    </>
  );
}

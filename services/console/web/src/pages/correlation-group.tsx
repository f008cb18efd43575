import { useState } from "preact/hooks";
import type { Incident } from "../api";
import { Link } from "../router";
import { Severity, SourceBadge, StateBadge } from "../ui";

/**
 * The incident list's correlation groups: incidents that several tools opened for one problem
 * (the organization's correlation, docs/how-to/correlation.md) show as one row, the group's newest
 * incident, with the group's count; expanding it shows the group's other incidents of the page
 * beneath it. Incidents without a group are left as they are.
 */
export function useCorrelationGroups(incidents: Incident[]): {
  /** The rows to show, in the list's order: a folded group shows only its first incident. */
  visible: Incident[];
  /** The group's count and toggle on its first row, a "related" mark on the others; null outside a group. */
  marker(incident: Incident): preact.JSX.Element | null;
} {
  const [open, setOpen] = useState<Set<string>>(new Set());
  const firstOf = new Map<string, string>();
  for (const incident of incidents) {
    const group = incident.correlationGroupId;
    if (group && (incident.correlationGroupSize ?? 0) > 1 && !firstOf.has(group)) firstOf.set(group, incident.id);
  }
  const visible = incidents.filter((i) => {
    const group = i.correlationGroupId;
    return !group || !firstOf.has(group) || firstOf.get(group) === i.id || open.has(group);
  });
  function toggle(group: string) {
    const next = new Set(open);
    if (next.has(group)) next.delete(group);
    else next.add(group);
    setOpen(next);
  }
  return {
    visible,
    marker(incident) {
      const group = incident.correlationGroupId;
      if (!group || !firstOf.has(group)) return null;
      if (firstOf.get(group) !== incident.id) {
        return (
          <span class="badge correlated" data-correlation-group={group}>
            Related
          </span>
        );
      }
      const size = incident.correlationGroupSize ?? 0;
      const expanded = open.has(group);
      return (
        <button
          type="button"
          class="badge correlated group-toggle"
          data-correlation-group={group}
          aria-expanded={expanded}
          title="Incidents of one problem reported by several sources"
          onClick={() => toggle(group)}
        >
          {`${size} related incidents ${expanded ? "▾" : "▸"}`}
        </button>
      );
    },
  };
}

/** An incident's page: the other incidents of its correlation group, each linking to its room. */
export function RelatedIncidents(props: { incident: Incident }) {
  const related = props.incident.related ?? [];
  if (related.length === 0) return null;
  // The rooms live beside this one: its path (from its workspaceUrl) with the other id.
  const here = new URL(props.incident.workspaceUrl, window.location.href).pathname;
  const roomOf = (id: string) => here.replace(/[^/]+$/, encodeURIComponent(id));
  return (
    <section class="related-incidents" aria-labelledby="related-heading">
      <h2 id="related-heading">{`Related incidents (${(props.incident.correlationGroupSize ?? related.length + 1) - 1})`}</h2>
      <ul>
        {related.map((r) => (
          <li key={r.id} data-related-id={r.id}>
            <Link href={roomOf(r.id)}>{r.title || "Untitled incident"}</Link> <SourceBadge source={r.source} /> <Severity severity={r.severity} />{" "}
            {r.state !== "open" ? <StateBadge state={r.state} /> : null}
          </li>
        ))}
      </ul>
    </section>
  );
}

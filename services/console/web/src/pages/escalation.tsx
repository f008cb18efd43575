import { useEffect, useState } from "preact/hooks";
import { api, type EscalationPolicy, type Incident, orgPath, SEVERITIES } from "../api";
import { ErrorNotice, PageHeading, Until, useAction, useLoad } from "../ui";

/**
 * The room's next acknowledgement deadline: which step, and how long until it (or how overdue the
 * sweep is). Absent once the incident is acknowledged, resolved or past its last step.
 */
export function NextEscalation(props: { incident: Incident; now: number }) {
  const next = props.incident.nextEscalation;
  if (!next) return null;
  return (
    <div class="next-escalation">
      <dt>Next escalation</dt>
      <dd>
        {`Step ${next.step} of ${next.steps} (${next.minutes} min) `}
        <Until at={next.dueAt} now={props.now} />
        <span class="muted"> unless acknowledged</span>
      </dd>
    </div>
  );
}

/** "5, 15, 30" from a list of minutes, and back; the service checks the order and bounds. */
const listText = (minutes: number[]) => minutes.join(", ");
function parseMinutes(text: string): number[] {
  return text
    .split(/[\s,]+/)
    .filter((part) => part !== "")
    .map((part) => (/^\d+$/.test(part) ? Number(part) : Number.NaN));
}

/** Each severity's field text from a policy. */
function listsOf(policy: EscalationPolicy): Record<string, string> {
  return Object.fromEntries(SEVERITIES.map((sev) => [sev, listText(policy.severities.find((s) => s.severity === sev)?.minutes ?? [])]));
}

/** The escalation page: each severity's acknowledgement deadlines, as minutes after opening. */
export function EscalationPage() {
  const policy = useLoad(() => api<EscalationPolicy>("GET", orgPath("/escalation")), []);
  // What the fields hold: filled once from the first load (the fields wait for it, so nothing typed
  // is overwritten by a late answer), then from each save's answer.
  const [lists, setLists] = useState<Record<string, string> | undefined>(undefined);
  const save = useAction();
  const [saved, setSaved] = useState(false);

  useEffect(() => {
    if (policy.data && lists === undefined) setLists(listsOf(policy.data));
  }, [policy.data]);

  async function submit(event: Event) {
    event.preventDefault();
    setSaved(false);
    const severities = SEVERITIES.map((severity) => ({ severity, minutes: parseMinutes(lists?.[severity] ?? "") }));
    const bad = severities.find((s) => s.minutes.some((m) => Number.isNaN(m)));
    if (bad) {
      save.setError(`${bad.severity.toUpperCase()}: write whole minutes separated by commas, e.g. 5, 15, 30`);
      return;
    }
    const answer = await save.run(() => api<EscalationPolicy>("PUT", orgPath("/escalation"), { severities }));
    if (answer) {
      setSaved(true);
      setLists(listsOf(answer));
      policy.reload();
    }
  }

  return (
    <>
      <PageHeading title="Escalation">Escalation</PageHeading>
      <p class="muted">
        An open incident nobody has acknowledged emits <code>incident.unacknowledged</code> to subscriptions at each of these minutes after it opened, one step
        each, so your receiver can notify again or escalate. Acknowledging or resolving stops the rest; a maintenance window covering the incident holds the
        steps that fall in it.
      </p>
      <ErrorNotice error={policy.error} />
      <form class="card" onSubmit={submit} aria-labelledby="esc-heading">
        <h2 id="esc-heading">Acknowledgement deadlines</h2>
        {SEVERITIES.map((sev) => (
          <div key={sev}>
            <label for={`esc-${sev}`}>{`${sev.toUpperCase()}: minutes after opening`}</label>
            <input
              id={`esc-${sev}`}
              inputMode="numeric"
              placeholder="none"
              value={lists?.[sev] ?? ""}
              disabled={lists === undefined}
              onInput={(e) => {
                const value = e.currentTarget.value;
                setSaved(false);
                setLists((l) => ({ ...l, [sev]: value }));
              }}
            />
          </div>
        ))}
        <p class="hint">Up to 10 steps each, ascending, from 1 minute to a week (10080). Empty: no deadline for that severity.</p>
        <ErrorNotice error={save.error} />
        {saved ? (
          <p class="ok-text" role="status">
            Saved.
          </p>
        ) : null}
        {policy.data?.updatedBy ? <p class="muted">{`Last changed by ${policy.data.updatedBy}`}</p> : null}
        <button type="submit" disabled={save.busy || policy.loading}>
          Save deadlines
        </button>
      </form>
    </>
  );
}

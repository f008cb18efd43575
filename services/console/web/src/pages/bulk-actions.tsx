import { useEffect, useRef, useState } from "preact/hooks";
import { api, orgPath, type Member } from "../api";
import { ErrorNotice, useAction } from "../ui";

/** What the bulk bar acts on: the rows ticked, or every incident matching the list's filter. */
export type Selection = { kind: "ids"; ids: string[] } | { kind: "filter"; filter: Record<string, string>; label: string };

export type Action = "acknowledge" | "assign" | "resolve" | "archive";
const VERBS: Record<Action, string> = { acknowledge: "Acknowledge", assign: "Assign", resolve: "Resolve", archive: "Archive" };

interface BulkResult {
  id: string;
  outcome: "done" | "unchanged" | "not_found" | "refused";
  reason: string | null;
}
interface BulkAnswer {
  results: BulkResult[];
  matched: number;
  nextCursor: string | null;
  /** The call stopped for time: the ids it did not start (with ids) or nextCursor (with a filter). */
  outOfTime: boolean;
  remainingIds: string[];
}

/**
 * Runs one bulk action to its end: ids until none remain (a call that runs out of time answers
 * the ids it did not start); a filter call after call (500 at most each) from the cursor each
 * answer gives, so "every incident matching" means every one.
 */
async function runBulk(selection: Selection, action: Action, ownerId: string): Promise<BulkResult[]> {
  const base = { action, ...(action === "assign" ? { ownerId } : {}) };
  const results: BulkResult[] = [];
  if (selection.kind === "ids") {
    let ids = selection.ids;
    while (ids.length > 0) {
      const answer: BulkAnswer = await api<BulkAnswer>("POST", orgPath("/incidents:bulk"), { ...base, ids });
      results.push(...answer.results);
      ids = answer.outOfTime ? answer.remainingIds : [];
    }
    return results;
  }
  let cursor: string | null = null;
  do {
    const answer: BulkAnswer = await api<BulkAnswer>("POST", orgPath("/incidents:bulk"), { ...base, filter: selection.filter, ...(cursor ? { cursor } : {}) });
    results.push(...answer.results);
    cursor = answer.nextCursor;
  } while (cursor);
  return results;
}

/** How many incidents a selection holds: the ids, or the filter's count from a preview call. */
async function countOf(selection: Selection): Promise<number> {
  if (selection.kind === "ids") return selection.ids.length;
  return (await api<BulkAnswer>("POST", orgPath("/incidents:bulk"), { action: "resolve", filter: selection.filter, preview: true })).matched;
}

const plural = (n: number) => `${n} incident${n === 1 ? "" : "s"}`;

/** The per-incident results, summed up, with the refused ones and why. */
function Results(props: { results: BulkResult[]; titleOf(id: string): string }) {
  const count = (outcome: BulkResult["outcome"]) => props.results.filter((r) => r.outcome === outcome).length;
  const refused = props.results.filter((r) => r.outcome === "refused" || r.outcome === "not_found");
  return (
    <div class="bulk-results" role="status">
      <p>{`${count("done")} done, ${count("unchanged")} already so, ${count("refused")} refused, ${count("not_found")} not found.`}</p>
      {refused.length > 0 ? (
        <ul>
          {refused.map((r) => (
            <li key={r.id}>{`${props.titleOf(r.id)}: ${r.reason ?? "no such incident"}`}</li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

/**
 * The bar over the incidents list once rows are selected: acknowledge, assign an owner, resolve or
 * archive them (or every incident matching the filter), after one confirmation that says how many.
 */
export function BulkBar(props: {
  selection: Selection | null;
  /** An action to confirm as soon as the selection is set (the one-click buttons). */
  asked?: Action | null;
  members: Member[];
  titleOf(id: string): string;
  onClear(): void;
  onDone(): void;
}) {
  const [ownerId, setOwnerId] = useState("");
  const [pending, setPending] = useState<{ action: Action; count: number } | null>(null);
  const [results, setResults] = useState<BulkResult[] | null>(null);
  const action = useAction();
  const selection = props.selection;

  const ask = (chosen: Action) =>
    action.run(async () => {
      if (!selection) return;
      setResults(null);
      setPending({ action: chosen, count: await countOf(selection) });
    });
  const confirm = () =>
    action.run(async () => {
      if (!selection || !pending) return;
      const done = await runBulk(selection, pending.action, ownerId);
      setPending(null);
      setResults(done);
      props.onClear();
      props.onDone();
    });
  // A one-click button sets the selection and the action together: ask once for each such click.
  const askedFor = useRef<Selection | null>(null);
  useEffect(() => {
    if (!selection) askedFor.current = null;
    else if (props.asked && askedFor.current !== selection) {
      askedFor.current = selection;
      void ask(props.asked);
    }
  });
  if (!selection && !results) return null;
  const ownerEmail = props.members.find((m) => m.id === ownerId)?.email ?? "";

  return (
    <section class="bulk-bar" aria-label="Bulk actions">
      {selection ? (
        <>
          <p class="bulk-selected">
            {selection.kind === "ids" ? `${plural(selection.ids.length)} selected` : selection.label}
            {" · "}
            <button type="button" class="link" onClick={props.onClear}>
              Clear selection
            </button>
          </p>
          {pending ? (
            <p class="bulk-confirm">
              <strong>{`${VERBS[pending.action]} ${plural(pending.count)}${pending.action === "assign" ? ` to ${ownerEmail}` : ""}?`}</strong>{" "}
              <button type="button" onClick={() => void confirm()} disabled={action.busy}>
                {action.busy ? "Working…" : `${VERBS[pending.action]} ${plural(pending.count)}`}
              </button>{" "}
              <button type="button" class="secondary" onClick={() => setPending(null)} disabled={action.busy}>
                Cancel
              </button>
            </p>
          ) : (
            <p class="bulk-actions">
              <button type="button" onClick={() => void ask("acknowledge")} disabled={action.busy}>
                Acknowledge
              </button>
              <label for="bulk-owner" class="sr-only">
                Owner to assign
              </label>
              <select id="bulk-owner" value={ownerId} onChange={(e) => setOwnerId(e.currentTarget.value)}>
                <option value="">Choose an owner…</option>
                {props.members.map((m) => (
                  <option key={m.id} value={m.id}>
                    {m.email}
                  </option>
                ))}
              </select>
              <button type="button" onClick={() => void ask("assign")} disabled={action.busy || ownerId === ""}>
                Assign
              </button>
              <button type="button" onClick={() => void ask("resolve")} disabled={action.busy}>
                Resolve
              </button>
              <button type="button" class="secondary" onClick={() => void ask("archive")} disabled={action.busy}>
                Archive
              </button>
            </p>
          )}
        </>
      ) : null}
      {results ? <Results results={results} titleOf={props.titleOf} /> : null}
      <ErrorNotice error={action.error} />
    </section>
  );
}

/** The filter of every open incident whose source's latest word was a recovery. */
export const RECOVERED_AT_SOURCE: Selection = {
  kind: "filter",
  filter: { state: "open", recovered: "yes" },
  label: "Every open incident recovered at source selected",
};

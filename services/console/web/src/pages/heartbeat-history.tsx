import { api, orgPath, type Heartbeat, type PingRecord } from "../api";
import { seconds } from "../format";
import { Ago, ErrorNotice, Snippet, useLoad, useNow, ListTable } from "../ui";
import { heartbeatSnippets, JOB_PLACEHOLDER } from "./heartbeat-snippets";

/** Run times of the pings that ended a run, oldest first, as bars scaled to the longest. */
function RunTimeChart(props: { pings: PingRecord[] }) {
  const runs = props.pings.filter((p) => p.runSeconds !== null).reverse();
  if (runs.length === 0) return <p class="muted">No run times yet: send a start ping before the job and a success or exit status after it.</p>;
  const longest = Math.max(...runs.map((p) => p.runSeconds!), 0.001);
  const width = 4;
  const height = 60;
  return (
    <figure class="run-chart">
      <svg
        role="img"
        aria-label={`Run times of the last ${runs.length} runs, longest ${seconds(Math.round(longest))}`}
        viewBox={`0 0 ${runs.length * (width + 1)} ${height}`}
        preserveAspectRatio="none"
      >
        {runs.map((p, i) => {
          const h = Math.max(1, (p.runSeconds! / longest) * height);
          return (
            <rect key={p.at} class={p.kind === "fail" ? "bar-fail" : "bar-ok"} x={i * (width + 1)} y={height - h} width={width} height={h}>
              <title>{`${p.at ? new Date(p.at).toLocaleString() : "unknown"}: ${p.runSeconds!.toFixed(1)} s${p.kind === "fail" ? " (failed)" : ""}`}</title>
            </rect>
          );
        })}
      </svg>
      <figcaption class="hint">{`Run times, oldest to newest; longest ${p1(longest)} s`}</figcaption>
    </figure>
  );
}

function p1(n: number): string {
  return n.toFixed(1);
}

/** What the job sent with one ping: its size, and the kept text behind a disclosure. */
function PingBody(props: { ping: PingRecord }) {
  const p = props.ping;
  if (p.bodyBytes === 0) return <span class="muted">—</span>;
  if (!p.body) return <span title="Not text: only its size is kept">{`${p.bodyBytes} B, not text`}</span>;
  return (
    <details class="ping-body">
      <summary>{p.bodyCut ? `${p.bodyBytes} B (first 10 KiB kept)` : `${p.bodyBytes} B`}</summary>
      <pre class="mono">{p.body}</pre>
    </details>
  );
}

/** The last 100 pings of a heartbeat, each with what the job sent, a chart of its run times and what the job said last. */
export function HeartbeatHistory(props: { heartbeat: Heartbeat }) {
  const now = useNow(5_000);
  const history = useLoad(
    () => api<{ pings: PingRecord[] }>("GET", orgPath(`/heartbeats/${encodeURIComponent(props.heartbeat.name)}/pings`)).then((r) => r.pings),
    [props.heartbeat.name],
  );
  const last = props.heartbeat.lastPing;
  const pings = history.data ?? [];
  return (
    <section class="history" aria-label={`Runs and signals of ${props.heartbeat.name}`}>
      <ErrorNotice error={history.error} />
      <RunTimeChart pings={pings} />
      {last?.body ? (
        <div>
          <p class="hint">{`What the job said with its last ping (${last.kind}${last.bodyCut ? `, first 10 KiB of ${last.bodyBytes} bytes` : ""}):`}</p>
          <pre class="mono last-body">{last.body}</pre>
        </div>
      ) : null}
      {pings.length === 0 ? (
        <p class="empty">{history.loading ? "Loading…" : "No pings yet."}</p>
      ) : (
        <ListTable
          class="pings"
          caption={`Last ${pings.length} pings of ${props.heartbeat.name}`}
          columns={["When", "Kind", "Run time", "Exit status", "From", "Body"]}
        >
          {pings.map((p) => (
            <tr key={`${p.at}-${p.kind}`} data-ping-kind={p.kind}>
              <td data-label="When">
                <Ago at={p.at} now={now} />
              </td>
              <td data-label="Kind">
                <span class={`badge ping-${p.kind}`}>{p.kind}</span>
              </td>
              <td data-label="Run time">{p.runSeconds === null ? "—" : `${p1(p.runSeconds)} s`}</td>
              <td data-label="Exit status">{p.exitStatus === null ? "—" : String(p.exitStatus)}</td>
              <td data-label="From" class="mono">
                {p.clientAddress || "—"}
              </td>
              <td data-label="Body">
                <PingBody ping={p} />
              </td>
            </tr>
          ))}
        </ListTable>
      )}
    </section>
  );
}

/**
 * Copy-paste setups for a heartbeat (the ping, a crontab line, systemd lines and a Kubernetes
 * CronJob), generated from its settings and its own ping URL.
 */
export function HeartbeatSnippets(props: { heartbeat: Heartbeat }) {
  const { snippets, notes } = heartbeatSnippets(props.heartbeat);
  return (
    <section class="snippets" aria-label={`Setups for ${props.heartbeat.name}`}>
      <p class="hint">{`Replace ${JOB_PLACEHOLDER} with the job. The ping URL holds the heartbeat's key: keep it as secret as a password.`}</p>
      {notes.map((note) => (
        <p key={note} class="hint">
          {note}
        </p>
      ))}
      {snippets.map((s) => (
        <Snippet key={s.id} id={s.id} title={s.title} text={s.text} />
      ))}
    </section>
  );
}

import { useState } from "preact/hooks";
import { api, orgPath } from "../api";
import { exact, safeHref } from "../format";
import { useLiveEvents } from "../live";
import { ColumnHeads, ErrorNotice, useAction, useLoad } from "../ui";

// The evidence an incident's investigation read from the connected remote sources: series drawn
// as SVG line charts by the code below (a charting library would add tens of KiB to a page that
// draws a few polylines), log entries as a table, partial reads with their reason. Live: it reads
// again as each read is recorded.

interface Point {
  t: string;
  v: number;
}
interface Series {
  label: string;
  unit: string | null;
  points: Point[];
}
interface LogEntry {
  t: string;
  line: string;
  labels: Record<string, string>;
  stream: string | null;
}
interface Evidence {
  run: number;
  connectionName: string;
  readName: string;
  call: string;
  operation: string;
  fetchedAt: string;
  partial: boolean;
  error: string | null;
  series: Series[];
  entries: LogEntry[];
  raw: string;
  rawCut: boolean;
  fromMs: string;
  toMs: string;
}
interface Investigation {
  run: number;
  state: string;
  reason: string | null;
  createdAt: string;
  completedAt: string | null;
  runbookUrl: string | null;
}
interface EvidenceList {
  investigations: Investigation[];
  evidence: Evidence[];
  openedAt: string | null;
}

const LIVE_TYPES = new Set(["ready", "incident.evidence_recorded", "incident.investigation_completed"]);
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"];
const WIDTH = 640;
const HEIGHT = 220;
const MARGIN = { top: 12, right: 16, bottom: 28, left: 56 };

function time(ms: number, spanMs: number): string {
  const d = new Date(ms);
  const hhmm = `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
  return spanMs > 36 * 3_600_000 ? `${d.getMonth() + 1}/${d.getDate()} ${hhmm}` : hhmm;
}

function number(value: number): string {
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-2)) return value.toExponential(1);
  return Number(value.toPrecision(3)).toString();
}

/** Evenly spaced ticks over [min, max]. */
function ticks(min: number, max: number, count: number): number[] {
  if (max === min) return [min];
  return Array.from({ length: count + 1 }, (_, i) => min + ((max - min) * i) / count);
}

/** The time span (the read's window, widened to every point) and the value range of a read's series. */
function extent(series: Series[], fromMs: number, toMs: number): { x0: number; x1: number; min: number; max: number } {
  const points = series.flatMap((s) => s.points.map((p) => ({ t: Date.parse(p.t), v: p.v })));
  const times = points.map((p) => p.t);
  const values = points.map((p) => p.v);
  return {
    x0: Math.min(fromMs || Math.min(...times), ...times),
    x1: Math.max(toMs || Math.max(...times), ...times),
    min: Math.min(...values),
    max: Math.max(...values),
  };
}

/** One line per series, in the chart's colors, placed by `sx` and `sy`. */
function SeriesLines(props: { series: Series[]; sx: (t: number) => number; sy: (v: number) => number; titled: boolean }) {
  return (
    <>
      {props.series.map((s, i) => (
        <polyline
          key={s.label || i}
          fill="none"
          stroke={COLORS[i % COLORS.length]}
          stroke-width="1.5"
          points={s.points.map((p) => `${props.sx(Date.parse(p.t)).toFixed(1)},${props.sy(p.v).toFixed(1)}`).join(" ")}
        >
          {props.titled ? <title>{s.label}</title> : null}
        </polyline>
      ))}
    </>
  );
}

/** Series as a line chart: a time axis over the read's window, the opened time marked, the unit on the value axis. */
export function LineChart(props: { title: string; series: Series[]; fromMs: number; toMs: number; openedMs: number | null }) {
  const { x0, x1, min, max } = extent(props.series, props.fromMs, props.toMs);
  let y0 = Math.min(0, min);
  let y1 = max;
  if (y0 === y1) y1 = y0 + 1;
  if (!Number.isFinite(y0)) y0 = 0;
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const sx = (t: number) => MARGIN.left + (x1 === x0 ? plotW / 2 : ((t - x0) / (x1 - x0)) * plotW);
  const sy = (v: number) => MARGIN.top + plotH - ((v - y0) / (y1 - y0)) * plotH;
  const units = [...new Set(props.series.map((s) => s.unit).filter((u): u is string => Boolean(u)))];
  const opened = props.openedMs !== null && props.openedMs >= x0 && props.openedMs <= x1 ? props.openedMs : null;
  return (
    <figure class="evidence-chart">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        role="img"
        aria-label={`${props.title}: ${props.series.length} series${units.length ? ` in ${units.join(", ")}` : ""}`}
        data-testid="evidence-chart"
      >
        <g class="axis" font-size="10" fill="currentColor">
          {ticks(x0, x1, 5).map((t) => (
            <g key={`x${t}`}>
              <line x1={sx(t)} x2={sx(t)} y1={MARGIN.top + plotH} y2={MARGIN.top + plotH + 4} stroke="currentColor" />
              <text x={sx(t)} y={HEIGHT - 8} text-anchor="middle">
                {time(t, x1 - x0)}
              </text>
            </g>
          ))}
          {ticks(y0, y1, 4).map((v) => (
            <g key={`y${v}`}>
              <line x1={MARGIN.left} x2={MARGIN.left + plotW} y1={sy(v)} y2={sy(v)} stroke="currentColor" stroke-opacity="0.12" />
              <text x={MARGIN.left - 6} y={sy(v) + 3} text-anchor="end">
                {number(v)}
              </text>
            </g>
          ))}
          <line x1={MARGIN.left} x2={MARGIN.left + plotW} y1={MARGIN.top + plotH} y2={MARGIN.top + plotH} stroke="currentColor" />
          <line x1={MARGIN.left} x2={MARGIN.left} y1={MARGIN.top} y2={MARGIN.top + plotH} stroke="currentColor" />
          {units.length ? (
            <text class="unit" x={12} y={MARGIN.top + plotH / 2} transform={`rotate(-90 12 ${MARGIN.top + plotH / 2})`} text-anchor="middle">
              {units.join(", ")}
            </text>
          ) : null}
        </g>
        {opened !== null ? (
          <g class="opened-marker" data-testid="opened-marker">
            <line x1={sx(opened)} x2={sx(opened)} y1={MARGIN.top} y2={MARGIN.top + plotH} stroke="#dc2626" stroke-dasharray="4 3" />
            <text
              x={sx(opened) > WIDTH - 70 ? sx(opened) - 4 : sx(opened) + 4}
              text-anchor={sx(opened) > WIDTH - 70 ? "end" : "start"}
              y={MARGIN.top + 10}
              font-size="10"
              fill="#dc2626"
            >
              opened
            </text>
          </g>
        ) : null}
        <SeriesLines series={props.series} sx={sx} sy={sy} titled />
      </svg>
      <figcaption>
        <ul class="legend">
          {props.series.map((s, i) => (
            <li key={s.label || i}>
              <span class="swatch" style={{ background: COLORS[i % COLORS.length] }} aria-hidden="true" />
              {s.label || `series ${i + 1}`}
              {s.unit ? ` (${s.unit})` : ""}
            </li>
          ))}
        </ul>
      </figcaption>
    </figure>
  );
}

function LogTable(props: { entries: LogEntry[] }) {
  return (
    <div class="table-wrap">
      <table class="evidence-logs">
        <ColumnHeads columns={["Time", "Line", "Labels"]} />
        <tbody>
          {props.entries.map((e, i) => (
            <tr key={`${e.t}-${i}`}>
              <td>
                <time dateTime={e.t}>{exact(e.t)}</time>
              </td>
              <td>
                <code>{e.line}</code>
              </td>
              <td>
                {Object.entries(e.labels ?? {})
                  .sort(([a], [b]) => a.localeCompare(b))
                  .concat(e.stream ? [["stream", e.stream]] : [])
                  .map(([k, v]) => `${k}=${v}`)
                  .join(" ")}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

const SPARK = { width: 160, height: 32, pad: 2 };

/** A read's series at a glance: one line per series over the read's window, no axes. */
function Sparkline(props: { title: string; series: Series[]; fromMs: number; toMs: number }) {
  const { x0, x1, min: y0, max: y1 } = extent(props.series, props.fromMs, props.toMs);
  const sx = (t: number) => SPARK.pad + (x1 === x0 ? 0.5 : (t - x0) / (x1 - x0)) * (SPARK.width - 2 * SPARK.pad);
  const sy = (v: number) => SPARK.height - SPARK.pad - (y1 === y0 ? 0.5 : (v - y0) / (y1 - y0)) * (SPARK.height - 2 * SPARK.pad);
  return (
    <svg
      class="sparkline"
      viewBox={`0 0 ${SPARK.width} ${SPARK.height}`}
      width={SPARK.width}
      height={SPARK.height}
      role="img"
      aria-label={`${props.title}: sparkline of ${props.series.length} series from ${number(y0)} to ${number(y1)}`}
      data-testid="evidence-sparkline"
    >
      <SeriesLines series={props.series} sx={sx} sy={sy} titled={false} />
    </svg>
  );
}

/** Log lines shown before a read is expanded. */
const FIRST_LINES = 5;

/** A raw answer that holds nothing: empty, null, [] or {}. */
function emptyRaw(raw: string): boolean {
  const text = raw.trim();
  return text === "" || text === "null" || text === "[]" || text === "{}" || text === '""';
}

/** The read's window as local times, e.g. "14:02 to 14:32". */
function windowText(e: Evidence): string {
  const from = Number(e.fromMs);
  const to = Number(e.toMs);
  if (!from || !to) return "";
  return ` (${time(from, to - from)} to ${time(to, to - from)})`;
}

/**
 * One read, folded to a summary: a sparkline for series, the count and first lines of a log, a
 * line saying the window held nothing. The chart and every line are a click away.
 */
function Read(props: { evidence: Evidence; openedMs: number | null }) {
  const e = props.evidence;
  const [expanded, setExpanded] = useState(false);
  const title = `${e.connectionName} / ${e.readName}`;
  const points = e.series.reduce((sum, s) => sum + s.points.length, 0);
  const units = [...new Set(e.series.map((s) => s.unit).filter((u): u is string => Boolean(u)))];
  // Series without a point found nothing either.
  const found = points > 0 || e.entries.length > 0;
  const rangeCall = e.call === "metrics/range" || e.call === "logs/range";
  const nothing = !found && !e.partial && (rangeCall || emptyRaw(e.raw));
  const id = `read-${e.run}-${e.connectionName}-${e.readName}`.replace(/[^A-Za-z0-9_-]/g, "_");
  return (
    <article class="evidence-read" data-testid="evidence-read">
      <h3>
        {title} <span class="muted">{e.call === "invoke" ? e.operation : e.call}</span>
      </h3>
      {e.partial ? (
        <p class="notice notice-warning" role="status">
          Partial: {e.error ?? "partial result"}
        </p>
      ) : null}
      {points > 0 ? (
        <div class="evidence-summary">
          <Sparkline title={title} series={e.series} fromMs={Number(e.fromMs)} toMs={Number(e.toMs)} />
          <span>{`${count(e.series.length, "series", "series")}${units.length ? ` in ${units.join(", ")}` : ""}, ${count(points, "point", "points")}`}</span>
          <button type="button" class="secondary small" aria-expanded={expanded} aria-controls={`${id}-chart`} onClick={() => setExpanded(!expanded)}>
            {expanded ? "Hide chart" : "Show chart"}
          </button>
        </div>
      ) : null}
      {points > 0 ? (
        <div id={`${id}-chart`}>
          {expanded ? <LineChart title={title} series={e.series} fromMs={Number(e.fromMs)} toMs={Number(e.toMs)} openedMs={props.openedMs} /> : null}
        </div>
      ) : null}
      {e.entries.length > 0 ? (
        <>
          <p class="evidence-summary">{count(e.entries.length, "log line", "log lines")}</p>
          <div id={`${id}-lines`}>
            <LogTable entries={expanded ? e.entries : e.entries.slice(0, FIRST_LINES)} />
          </div>
          {e.entries.length > FIRST_LINES ? (
            <button type="button" class="secondary small" aria-expanded={expanded} aria-controls={`${id}-lines`} onClick={() => setExpanded(!expanded)}>
              {expanded ? `Show the first ${FIRST_LINES} lines` : `Show all ${e.entries.length} lines`}
            </button>
          ) : null}
        </>
      ) : null}
      {nothing ? <p class="muted">{`No data in the window${windowText(e)}.`}</p> : null}
      {!found && !nothing && e.raw ? (
        <details>
          <summary>{e.rawCut ? "Raw answer (cut at 64 KiB)" : "Raw answer"}</summary>
          <pre>{e.raw}</pre>
        </details>
      ) : null}
    </article>
  );
}

function count(n: number, one: string, many: string): string {
  return `${n.toLocaleString("en")} ${n === 1 ? one : many}`;
}

/** The incident's evidence: the latest run's reads, its runbook first, and a button to run it again. */
export function EvidencePanel(props: { incidentId: string; open: boolean }) {
  const path = orgPath(`/incidents/${encodeURIComponent(props.incidentId)}`);
  const list = useLoad(() => api<EvidenceList>("GET", `${path}/evidence`), [path]);
  const action = useAction();
  useLiveEvents((event) => {
    if (event.type === "ready" || (LIVE_TYPES.has(event.type) && event.data.incidentId === props.incidentId)) list.reload();
  });
  const data = list.data;
  if (!data || (data.investigations.length === 0 && !list.error)) return null;
  const latest = data.investigations[0];
  const reads = latest ? data.evidence.filter((e) => e.run === latest.run) : [];
  const openedMs = data.openedAt ? Date.parse(data.openedAt) : null;
  const runbook = safeHref(latest?.runbookUrl);
  const partial = reads.filter((e) => e.partial).length;
  return (
    <section id="evidence" aria-labelledby="evidence-heading" class="evidence">
      <h2 id="evidence-heading">Evidence</h2>
      {runbook ? (
        <p class="runbook">
          Runbook:{" "}
          <a href={runbook} target="_blank" rel="noopener noreferrer">
            {latest?.runbookUrl}
          </a>
        </p>
      ) : null}
      {latest ? (
        <p class="muted" aria-live="polite">
          {latest.state === "done"
            ? `Investigation ${latest.run}: ${reads.length} ${reads.length === 1 ? "read" : "reads"}, ${partial} partial, completed ${exact(latest.completedAt)}.`
            : latest.state === "skipped" || latest.state === "failed"
              ? `Investigation ${latest.run} ${latest.state}: ${latest.reason ?? ""}`
              : `Investigation ${latest.run} ${latest.state}: ${reads.length} ${reads.length === 1 ? "read" : "reads"} so far…`}
        </p>
      ) : null}
      {props.open ? (
        <p>
          <button
            type="button"
            class="secondary"
            disabled={action.busy || latest?.state === "pending" || latest?.state === "running"}
            onClick={() =>
              void action.run(async () => {
                await api("POST", `${path}/investigate`);
                list.reload();
              })
            }
          >
            Investigate again
          </button>
        </p>
      ) : null}
      {reads.map((e) => (
        <Read key={`${e.run}-${e.connectionName}-${e.readName}`} evidence={e} openedMs={openedMs} />
      ))}
      <ErrorNotice error={action.error || list.error} />
    </section>
  );
}

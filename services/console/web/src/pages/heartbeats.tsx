import { useState } from "preact/hooks";
import { api, orgPath, type Heartbeat } from "../api";
import { exact, seconds } from "../format";
import { Link } from "../router";
import { Ago, askConfirm, ErrorNotice, PageHeading, Until, useAction, useLoad, useNow, ListTable } from "../ui";
import { HeartbeatHistory, HeartbeatSnippets } from "./heartbeat-history";

/** "1 h + 5 min", or for a schedule "30 2 * * * (Europe/Berlin) + 5 min", and "× 3 missed" when more misses are allowed. */
function expectation(heartbeat: Heartbeat): string {
  const expected = heartbeat.schedule ? `${heartbeat.schedule} (${heartbeat.timezone ?? "UTC"})` : seconds(heartbeat.expectedIntervalSeconds);
  const misses = heartbeat.alertAfterMisses > 1 ? `, alert after ${heartbeat.alertAfterMisses} missed` : "";
  return `${expected} + ${seconds(heartbeat.graceSeconds)}${misses}`;
}

/** Run limits in words: "runs 30 s to 1 h", or "" without any. */
function runLimits(heartbeat: Heartbeat): string {
  const min = heartbeat.minRunSeconds ? seconds(heartbeat.minRunSeconds) : "";
  const max = heartbeat.maxRunSeconds ? seconds(heartbeat.maxRunSeconds) : "";
  if (min && max) return `runs ${min} to ${max}`;
  if (min) return `runs at least ${min}`;
  if (max) return `runs at most ${max}`;
  return "";
}

/** A live duration to the second: "45 s", "4 min 10 s", "2 h 3 min", "1 d 4 h". */
function liveSpan(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(total / 86_400);
  const h = Math.floor((total % 86_400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  if (d > 0) return h ? `${d} d ${h} h` : `${d} d`;
  if (h > 0) return m ? `${h} h ${m} min` : `${h} h`;
  if (m > 0) return `${m} min ${sec} s`;
  return `${sec} s`;
}

const NAME_PATTERN = "[a-z0-9][a-z0-9._\\-]{0,62}";

function SecondsField(props: { id: string; label: string; value: string; onInput(value: string): void; optional?: boolean; hint?: string }) {
  const n = Number(props.value);
  return (
    <div>
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="number"
        inputMode="numeric"
        min={props.optional ? 0 : 1}
        step={1}
        required={!props.optional}
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
        aria-describedby={`${props.id}-hint`}
      />
      <p class="hint" id={`${props.id}-hint`}>
        {Number.isInteger(n) && n > 0 ? `Seconds (${seconds(n)})` : (props.hint ?? "Seconds")}
      </p>
    </div>
  );
}

/** What the forms edit: the cadence (an interval or a cron schedule in a zone), grace, run limits and misses. */
interface Settings {
  kind: "interval" | "schedule";
  every: string;
  schedule: string;
  timezone: string;
  grace: string;
  minRun: string;
  maxRun: string;
  misses: string;
}

function settingsOf(heartbeat: Heartbeat | undefined): Settings {
  return {
    kind: heartbeat?.schedule ? "schedule" : "interval",
    every: String(heartbeat?.expectedIntervalSeconds || 3600),
    schedule: heartbeat?.schedule ?? "",
    timezone: heartbeat?.timezone ?? "UTC",
    grace: String(heartbeat?.graceSeconds ?? 300),
    minRun: heartbeat?.minRunSeconds ? String(heartbeat.minRunSeconds) : "",
    maxRun: heartbeat?.maxRunSeconds ? String(heartbeat.maxRunSeconds) : "",
    misses: String(heartbeat?.alertAfterMisses ?? 1),
  };
}

/**
 * The request body for the settings: `forUpdate` sends an empty run limit as 0 (which removes it),
 * where a registration leaves it out.
 */
function bodyOf(settings: Settings, forUpdate: boolean): Record<string, unknown> {
  const body: Record<string, unknown> =
    settings.kind === "schedule"
      ? { schedule: settings.schedule.trim(), timezone: settings.timezone.trim() || "UTC" }
      : { expectedIntervalSeconds: Number(settings.every) };
  body.graceSeconds = Number(settings.grace);
  for (const [field, value] of [
    ["minRunSeconds", settings.minRun],
    ["maxRunSeconds", settings.maxRun],
  ] as const) {
    if (value.trim() && Number(value) > 0) body[field] = Number(value);
    else if (forUpdate) body[field] = 0;
  }
  body.alertAfterMisses = Number(settings.misses);
  return body;
}

/** The time zones the browser knows, for the time zone field's suggestions. */
function timeZones(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (key: string) => string[] };
  return intl.supportedValuesOf ? ["UTC", ...intl.supportedValuesOf("timeZone")] : ["UTC"];
}

function SettingsFields(props: { prefix: string; settings: Settings; onChange(settings: Settings): void }) {
  const { prefix, settings } = props;
  const set = (change: Partial<Settings>) => props.onChange({ ...settings, ...change });
  return (
    <>
      <fieldset class="cadence">
        <legend>Expects a ping</legend>
        {(
          [
            ["interval", "Every interval"],
            ["schedule", "On a cron schedule"],
          ] as const
        ).map(([kind, label]) => (
          <label class="check" key={kind}>
            <input type="radio" style={{ width: "auto" }} name={`${prefix}-kind`} checked={settings.kind === kind} onChange={() => set({ kind })} />
            {label}
          </label>
        ))}
      </fieldset>
      <div class="grid-3">
        {settings.kind === "interval" ? (
          <SecondsField id={`${prefix}-interval`} label="Expected interval" value={settings.every} onInput={(every) => set({ every })} />
        ) : (
          <>
            <div>
              <label for={`${prefix}-schedule`}>Schedule</label>
              <input
                id={`${prefix}-schedule`}
                class="mono"
                required
                placeholder="30 2 * * *"
                value={settings.schedule}
                onInput={(e) => set({ schedule: e.currentTarget.value })}
                aria-describedby={`${prefix}-schedule-hint`}
              />
              <p class="hint" id={`${prefix}-schedule-hint`}>
                Five crontab fields (minute hour day month weekday) or @hourly, @daily, @weekly, @monthly.
              </p>
            </div>
            <div>
              <label for={`${prefix}-timezone`}>Time zone</label>
              <input
                id={`${prefix}-timezone`}
                list={`${prefix}-timezones`}
                value={settings.timezone}
                onInput={(e) => set({ timezone: e.currentTarget.value })}
                aria-describedby={`${prefix}-timezone-hint`}
              />
              <datalist id={`${prefix}-timezones`}>
                {timeZones().map((zone) => (
                  <option key={zone} value={zone} />
                ))}
              </datalist>
              <p class="hint" id={`${prefix}-timezone-hint`}>
                The zone the schedule is read in, such as Europe/Berlin.
              </p>
            </div>
          </>
        )}
        <SecondsField id={`${prefix}-grace`} label="Grace" value={settings.grace} onInput={(grace) => set({ grace })} />
        <SecondsField
          id={`${prefix}-min-run`}
          label="Shortest run"
          optional
          hint="Optional: a run that ends sooner opens an incident"
          value={settings.minRun}
          onInput={(minRun) => set({ minRun })}
        />
        <SecondsField
          id={`${prefix}-max-run`}
          label="Longest run"
          optional
          hint="Optional: a run still going after this opens an incident"
          value={settings.maxRun}
          onInput={(maxRun) => set({ maxRun })}
        />
        <div>
          <label for={`${prefix}-misses`}>Alert after missed pings</label>
          <input
            id={`${prefix}-misses`}
            type="number"
            inputMode="numeric"
            min={1}
            max={100}
            step={1}
            required
            value={settings.misses}
            onInput={(e) => set({ misses: e.currentTarget.value })}
            aria-describedby={`${prefix}-misses-hint`}
          />
          <p class="hint" id={`${prefix}-misses-hint`}>
            Missed in a row before it counts as silent: 1 alerts on the first, more suits a flaky network.
          </p>
        </div>
      </div>
    </>
  );
}

function EditRow(props: { heartbeat: Heartbeat; onDone(changed: boolean): void }) {
  const [settings, setSettings] = useState(() => settingsOf(props.heartbeat));
  const action = useAction();
  async function submit(event: Event) {
    event.preventDefault();
    const ok = await action.run(() => api<Heartbeat>("PATCH", orgPath(`/heartbeats/${encodeURIComponent(props.heartbeat.name)}`), bodyOf(settings, true)));
    if (ok) props.onDone(true);
  }
  return (
    <form class="edit" onSubmit={submit} aria-label={`Edit ${props.heartbeat.name}`}>
      <SettingsFields prefix={`edit-${props.heartbeat.name}`} settings={settings} onChange={setSettings} />
      <div class="form-end">
        <ErrorNotice error={action.error} />
        <div class="actions">
          <button type="submit" disabled={action.busy}>
            Save
          </button>
          <button type="button" class="secondary" onClick={() => props.onDone(false)}>
            Cancel
          </button>
        </div>
      </div>
    </form>
  );
}

/** How long since the last ping (or the registration), counted live while the heartbeat is silent. */
function silentSince(heartbeat: Heartbeat): string | null {
  return heartbeat.lastSeenAt ?? heartbeat.createdAt;
}

function StatusCell(props: { heartbeat: Heartbeat; org: string; now: number }) {
  const { heartbeat } = props;
  const since = silentSince(heartbeat);
  // Silent time once the deadline has passed; a failure's open incident alone is not silence.
  const silentFor =
    heartbeat.status === "silent" && since && heartbeat.dueAt && Date.parse(heartbeat.dueAt) < props.now ? liveSpan(props.now - Date.parse(since)) : "";
  return (
    <>
      <span class={`badge hb-${heartbeat.status}`}>{heartbeat.status}</span>
      {silentFor ? (
        <span class="silent-for" title={`No ping since ${exact(since)}`}>
          {` for ${silentFor}`}
        </span>
      ) : null}
      {heartbeat.openIncidentId ? (
        <>
          {" "}
          <Link
            href={`/o/${encodeURIComponent(props.org)}/incidents/${encodeURIComponent(heartbeat.openIncidentId)}`}
            aria-label={`Open incident of ${heartbeat.name}`}
          >
            open incident
          </Link>
        </>
      ) : null}
    </>
  );
}

/**
 * The heartbeats page: the organization's heartbeats with their status and next expected ping, and
 * a form to register one.
 */
/** Shows (or hides again) the heartbeat's `label` panel: one heartbeat's at a time. */
function ShowButton(props: { label: string; name: string; shown: string; onShow(name: string): void }) {
  const open = props.shown === props.name;
  return (
    <button
      type="button"
      class="secondary"
      onClick={() => props.onShow(open ? "" : props.name)}
      aria-expanded={open}
      aria-label={`${props.label} of ${props.name}`}
    >
      {props.label}
    </button>
  );
}

export function HeartbeatsPage(props: { org: string }) {
  // Each second: a silent heartbeat's silent time counts live.
  const now = useNow(1_000);
  const list = useLoad(() => api<{ heartbeats: Heartbeat[] }>("GET", orgPath("/heartbeats")).then((r) => r.heartbeats), []);
  const [name, setName] = useState("");
  const [settings, setSettings] = useState(() => settingsOf(undefined));
  const [editing, setEditing] = useState("");
  const [showing, setShowing] = useState("");
  const [setup, setSetup] = useState("");
  const [registered, setRegistered] = useState<Heartbeat | undefined>(undefined);
  const register = useAction();
  const rowAction = useAction();

  async function submit(event: Event) {
    event.preventDefault();
    const created = await register.run(() => api<Heartbeat>("POST", orgPath("/heartbeats"), { name: name.trim(), ...bodyOf(settings, false) }));
    if (created) {
      setRegistered(created);
      setName("");
      list.reload();
    }
  }

  async function remove(heartbeat: Heartbeat) {
    const ok = await askConfirm({
      title: `Delete the heartbeat ${heartbeat.name}?`,
      message: "Its pings are then refused and its silence no longer opens incidents.",
      confirmLabel: "Delete",
      danger: true,
    });
    if (!ok) return;
    await rowAction.run(async () => {
      await api("DELETE", orgPath(`/heartbeats/${encodeURIComponent(heartbeat.name)}`));
      list.reload();
    });
  }

  const heartbeats = list.data ?? [];
  return (
    <>
      <PageHeading title="Heartbeats">Heartbeats</PageHeading>
      <p class="muted">
        Jobs that ping when they run. When pings stop for longer than the interval (or the schedule) plus the grace, an incident opens naming the heartbeat.
      </p>
      <ErrorNotice error={list.error || rowAction.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : heartbeats.length === 0 ? (
        <p class="empty">No heartbeats registered yet.</p>
      ) : (
        <ListTable class="heartbeats" caption="Registered heartbeats" columns={["Name", "Interval + grace", "Last seen", "Due", "Status"]} actions>
          {heartbeats.map((heartbeat) =>
            editing === heartbeat.name ? (
              <tr key={heartbeat.name}>
                <td data-label="Name" class="mono">
                  {heartbeat.name}
                </td>
                <td colSpan={5}>
                  <EditRow
                    heartbeat={heartbeat}
                    onDone={(changed) => {
                      setEditing("");
                      if (changed) list.reload();
                    }}
                  />
                </td>
              </tr>
            ) : (
              [
                <tr key={heartbeat.name} data-heartbeat={heartbeat.name}>
                  <td data-label="Name" class="mono">
                    {heartbeat.name}
                  </td>
                  <td data-label="Interval + grace">
                    {expectation(heartbeat)}
                    {runLimits(heartbeat) ? <span class="hint run-limits">{`; ${runLimits(heartbeat)}`}</span> : null}
                  </td>
                  <td data-label="Last seen">
                    <Ago at={heartbeat.lastSeenAt} now={now} />
                  </td>
                  <td data-label="Due">
                    <Until at={heartbeat.dueAt} now={now} />
                  </td>
                  <td data-label="Status">
                    <StatusCell heartbeat={heartbeat} org={props.org} now={now} />
                  </td>
                  <td data-label="Actions" class="row-actions">
                    <ShowButton label="History" name={heartbeat.name} shown={showing} onShow={setShowing} />
                    <ShowButton label="Setup" name={heartbeat.name} shown={setup} onShow={setSetup} />
                    <button type="button" class="secondary" onClick={() => setEditing(heartbeat.name)} aria-label={`Edit ${heartbeat.name}`}>
                      Edit
                    </button>
                    <button type="button" class="danger" onClick={() => remove(heartbeat)} disabled={rowAction.busy} aria-label={`Delete ${heartbeat.name}`}>
                      Delete
                    </button>
                  </td>
                </tr>,
                showing === heartbeat.name ? (
                  <tr key={`${heartbeat.name}-history`} class="history-row">
                    <td colSpan={6}>
                      <HeartbeatHistory heartbeat={heartbeat} />
                    </td>
                  </tr>
                ) : null,
                setup === heartbeat.name ? (
                  <tr key={`${heartbeat.name}-setup`} class="history-row">
                    <td colSpan={6}>
                      <HeartbeatSnippets heartbeat={heartbeat} />
                    </td>
                  </tr>
                ) : null,
              ]
            ),
          )}
        </ListTable>
      )}

      <form class="card" onSubmit={submit} aria-labelledby="register-heading">
        <h2 id="register-heading">Register a heartbeat</h2>
        <div class="grid-3">
          <div>
            <label for="hb-name">Name</label>
            <input
              id="hb-name"
              required
              pattern={NAME_PATTERN}
              title="Lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
              aria-describedby="hb-name-hint"
            />
            <p class="hint" id="hb-name-hint">
              Fixed once created: renaming is delete and register again.
            </p>
          </div>
        </div>
        <SettingsFields prefix="hb" settings={settings} onChange={setSettings} />
        <ErrorNotice error={register.error} />
        <button type="submit" disabled={register.busy}>
          Register
        </button>
        {registered ? (
          <div class="issued" role="status">
            <p>{`Registered ${registered.name}. Its ping URL authenticates on its own: add the ping to the end of the job, or report the start, the exit status and the output of each run.`}</p>
            <HeartbeatSnippets heartbeat={registered} />
          </div>
        ) : null}
      </form>
    </>
  );
}

import { useEffect, useState } from "preact/hooks";
import { api, orgPath, type Session } from "./api";
import { ago, exact } from "./format";
import { useLiveEvents, useLiveStatus } from "./live";
import { navigate } from "./router";
import { Dialog, setTitleCount, useNow } from "./ui";

// What draws a responder's attention: the number of open unacknowledged incidents in the tab's
// title, an opt-in browser notification for each new incident at or above a chosen severity, and
// a full-width banner while the live connection is lost.

const SEVERITIES = ["sev1", "sev2", "sev3", "sev4"] as const;
type Threshold = (typeof SEVERITIES)[number];
const SETTINGS_KEY = "warroom.notifications";

export interface NotifySettings {
  enabled: boolean;
  /** Notify for incidents at or above this severity (sev1 is the highest). */
  minSeverity: Threshold;
}

export function loadNotifySettings(): NotifySettings {
  try {
    const raw = JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? "null") as Partial<NotifySettings> | null;
    if (raw && typeof raw.enabled === "boolean" && SEVERITIES.includes(raw.minSeverity as Threshold)) return raw as NotifySettings;
  } catch {
    // A setting that does not parse is no setting.
  }
  return { enabled: false, minSeverity: "sev2" };
}

function saveNotifySettings(settings: NotifySettings): void {
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
}

/** Whether a severity is at or above the threshold; an incident without one counts as the lowest. */
export function meetsThreshold(severity: string, threshold: Threshold): boolean {
  const rank = SEVERITIES.indexOf(severity as Threshold);
  return (rank < 0 ? SEVERITIES.length - 1 : rank) <= SEVERITIES.indexOf(threshold);
}

function notificationsSupported(): boolean {
  return typeof Notification !== "undefined";
}

/**
 * Keeps the tab title's count of open unacknowledged incidents current (an incident acknowledged
 * carries `acknowledgedAt`), and shows a notification for each new incident that meets the
 * setting, while the page is open.
 */
export function Attention(props: { session: Session }) {
  const [tick, setTick] = useState(0);
  useLiveEvents((event) => {
    if (event.type === "ready" || event.type.startsWith("incident.")) setTick((t) => t + 1);
    if (event.type !== "incident.opened") return;
    const settings = loadNotifySettings();
    if (!settings.enabled || !notificationsSupported() || Notification.permission !== "granted") return;
    const severity = String(event.data.severity ?? "");
    if (!meetsThreshold(severity, settings.minSeverity)) return;
    const id = String(event.data.incidentId ?? "");
    const note = new Notification(`${severity ? `${severity.toUpperCase()} ` : ""}New incident`, {
      body: `${String(event.data.title ?? "")} (${String(event.data.source ?? "unknown source")})`,
      tag: `incident-${id}`,
    });
    note.onclick = () => {
      window.focus();
      navigate(`/o/${encodeURIComponent(props.session.org)}/incidents/${encodeURIComponent(id)}`);
      note.close();
    };
  });
  useEffect(() => {
    let alive = true;
    // A burst of events (an alert storm) costs one read: each event restarts the short wait.
    const timer = setTimeout(() => {
      api<{ incidents: { acknowledgedAt?: string | null }[]; nextCursor?: string }>("GET", orgPath("/incidents?state=open&limit=1000"))
        .then((res) => {
          if (!alive) return;
          const count = res.incidents.filter((i) => !i.acknowledgedAt).length;
          setTitleCount(count, res.nextCursor ? "+" : "");
        })
        .catch(() => undefined);
    }, 300);
    return () => {
      alive = false;
      clearTimeout(timer);
    };
  }, [tick, props.session.org, props.session.token]);
  useEffect(() => () => setTitleCount(0, ""), []);
  return null;
}

/** The notification setting: a header button opening a dialog. */
export function NotifySettingsButton() {
  const [open, setOpen] = useState(false);
  const [settings, setSettings] = useState(loadNotifySettings);
  const [message, setMessage] = useState("");
  const supported = notificationsSupported();

  async function save(event: Event) {
    event.preventDefault();
    let next = settings;
    if (next.enabled && supported && Notification.permission !== "granted") {
      const answer = await Notification.requestPermission();
      if (answer !== "granted") {
        next = { ...next, enabled: false };
        setSettings(next);
        setMessage("The browser refused notifications for this site. Allow them in the site settings, then turn them on here again.");
        saveNotifySettings(next);
        return;
      }
    }
    saveNotifySettings(next);
    setMessage("");
    setOpen(false);
  }

  const current = loadNotifySettings();
  return (
    <>
      <button type="button" class="secondary small" onClick={() => setOpen(true)} aria-haspopup="dialog">
        {current.enabled ? `Notifications: ${current.minSeverity.toUpperCase()} and above` : "Notifications: off"}
      </button>
      <Dialog open={open} title="Browser notifications" onCancel={() => setOpen(false)}>
        <form onSubmit={save}>
          {supported ? null : <p class="notice notice-warning">This browser has no notifications.</p>}
          <label class="check">
            <input type="checkbox" checked={settings.enabled} onChange={(e) => setSettings((s) => ({ ...s, enabled: e.currentTarget.checked }))} />
            Notify me of new incidents while this console is open
          </label>
          <label for="notify-severity">At or above</label>
          <select
            id="notify-severity"
            value={settings.minSeverity}
            onChange={(e) => setSettings((s) => ({ ...s, minSeverity: e.currentTarget.value as Threshold }))}
          >
            {SEVERITIES.map((sev) => (
              <option key={sev} value={sev}>
                {sev.toUpperCase()}
              </option>
            ))}
          </select>
          <p class="hint">Kept in this browser only. An incident without a severity counts as SEV4.</p>
          {message ? (
            <p class="notice notice-error" role="alert">
              {message}
            </p>
          ) : null}
          <div class="dialog-actions">
            <button type="button" class="secondary" onClick={() => setOpen(false)}>
              Cancel
            </button>
            <button type="submit">Save</button>
          </div>
        </form>
      </Dialog>
    </>
  );
}

/** A full-width banner while the live connection is lost, with the time of the last update. */
export function OfflineBanner() {
  const status = useLiveStatus();
  const now = useNow(5_000);
  if (status.state !== "offline") return null;
  const last = status.lastUpdateAt ? new Date(status.lastUpdateAt).toISOString() : null;
  return (
    <div class="offline-banner" role="alert">
      <strong>Connection to the service lost.</strong>{" "}
      {last ? (
        <>
          Last update{" "}
          <time dateTime={last}>
            {exact(last)} ({ago(last, now)})
          </time>
          .
        </>
      ) : (
        "No update received yet."
      )}{" "}
      What you see may be out of date; reconnecting, and everything is read again once it is back.
    </div>
  );
}

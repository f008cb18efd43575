import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, clearSession, loadSession, onSessionChange, type Session } from "./api";
import { startLive, useLiveStatus, useLiveState } from "./live";
import { Attention, NotifySettingsButton, OfflineBanner } from "./notice";
import { Link, navigate, useLocation } from "./router";
import { ApiKeysPage } from "./pages/api-keys";
import { AuditLogPage } from "./pages/audit-log";
import { CustomSourcesPage } from "./pages/custom-sources";
import { HeartbeatsPage } from "./pages/heartbeats";
import { IncidentsPage } from "./pages/incidents";
import { IntegrationsPage } from "./pages/integrations";
import { LoginPage } from "./pages/login";
import { EscalationPage } from "./pages/escalation";
import { MaintenancePage } from "./pages/maintenance";
import { MembersPage } from "./pages/members";
import { RoomPage } from "./pages/room";
import { ConfirmHost, PageHeading } from "./ui";

const NAV = [
  { href: "/incidents", label: "Incidents" },
  { href: "/integrations", label: "Integrations" },
  { href: "/heartbeats", label: "Heartbeats" },
  { href: "/maintenance", label: "Maintenance" },
  { href: "/escalation", label: "Escalation" },
  { href: "/members", label: "Members" },
  { href: "/api-keys", label: "API keys" },
  { href: "/audit-log", label: "Audit log" },
];

/** The room's path is the incident's workspaceUrl path, so a link from a chat card opens it here. */
const ROOM = /^\/o\/([^/]+)\/incidents\/([^/]+)\/?$/;

function useSession(): Session | null {
  const [session, setSession] = useState(loadSession);
  useEffect(() => onSessionChange(() => setSession(loadSession())), []);
  return session;
}

function LiveIndicator() {
  const state = useLiveState();
  const text = state === "live" ? "Live" : state === "connecting" ? "Connecting…" : "Offline, reconnecting…";
  return (
    <span class={`live live-${state}`} role="status" aria-live="polite" title="Live updates">
      <span class="dot" aria-hidden="true" />
      {text}
    </span>
  );
}

function Shell(props: { session: Session; path: string; children: ComponentChildren }) {
  useEffect(() => startLive(props.session), [props.session.token, props.session.org]);
  // Each time the live connection comes back, the page is mounted afresh: every view reads again,
  // including those that do not follow live events.
  const { comebacks } = useLiveStatus();
  async function signOut() {
    await api("POST", "/auth/logout").catch(() => undefined);
    clearSession("You are signed out.");
    navigate("/login", { replace: true });
  }
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <OfflineBanner />
      <Attention session={props.session} />
      <header class="top">
        <div class="top-row">
          <Link href="/incidents" class="brand">
            <span class="brand-mark" aria-hidden="true" />
            warroom
          </Link>
          <span class="org" title="Organization">
            {props.session.org}
          </span>
          <LiveIndicator />
          <span class="spacer" />
          <NotifySettingsButton />
          <span class="who muted">{props.session.email}</span>
          <button type="button" class="secondary small" onClick={signOut}>
            Sign out
          </button>
        </div>
        <nav aria-label="Main">
          <ul>
            {NAV.map((item) => (
              <li key={item.href}>
                <Link href={item.href} aria-current={props.path.startsWith(item.href) ? "page" : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      </header>
      <main id="main" tabIndex={-1} key={comebacks}>
        {props.children}
      </main>
      <ConfirmHost />
    </>
  );
}

function Redirect(props: { to: string }) {
  useEffect(() => navigate(props.to.startsWith("/") && !props.to.startsWith("//") ? props.to : "/incidents", { replace: true }), [props.to]);
  return null;
}

function NotFound() {
  return (
    <>
      <PageHeading title="Not found">Page not found</PageHeading>
      <p>
        <Link href="/incidents">Go to the incidents</Link>
      </p>
    </>
  );
}

/**
 * The console's root: the sign-in page without a session (or for a room of another organization),
 * else the page the location names.
 */
export function App() {
  const loc = useLocation();
  const session = useSession();
  const room = ROOM.exec(loc.path);
  const next = loc.path === "/" ? "/incidents" : `${loc.path}${loc.query.toString() ? `?${loc.query.toString()}` : ""}`;

  if (!session) {
    const afterLogin = loc.path === "/login" ? (loc.query.get("next") ?? undefined) : next;
    return <LoginPage org={room ? decodeURIComponent(room[1]!) : undefined} next={afterLogin} />;
  }
  if (loc.path === "/login") return <Redirect to={loc.query.get("next") ?? "/incidents"} />;
  if (room && decodeURIComponent(room[1]!) !== session.org) {
    return (
      <LoginPage
        org={decodeURIComponent(room[1]!)}
        next={next}
        note={`This incident belongs to the organization ${decodeURIComponent(room[1]!)}. Sign in to it to open the room.`}
      />
    );
  }

  let page: ComponentChildren;
  if (room) page = <RoomPage id={decodeURIComponent(room[2]!)} />;
  else if (loc.path === "/" || loc.path === "/incidents") page = <IncidentsPage state={loc.query.get("state") ?? "open"} org={session.org} query={loc.query} />;
  else if (loc.path === "/integrations") page = <IntegrationsPage org={session.org} />;
  else if (loc.path === "/custom-sources") page = <CustomSourcesPage org={session.org} selected={loc.query.get("id") ?? undefined} />;
  else if (loc.path === "/heartbeats") page = <HeartbeatsPage org={session.org} />;
  else if (loc.path === "/maintenance") page = <MaintenancePage />;
  else if (loc.path === "/escalation") page = <EscalationPage />;
  else if (loc.path === "/members") page = <MembersPage />;
  else if (loc.path === "/api-keys") page = <ApiKeysPage />;
  else if (loc.path === "/audit-log") page = <AuditLogPage />;
  else page = <NotFound />;

  return (
    <Shell session={session} path={loc.path === "/" || room ? "/incidents" : loc.path === "/custom-sources" ? "/integrations" : loc.path}>
      {page}
    </Shell>
  );
}

import { useState } from "preact/hooks";
import { api, errorText, saveSession, takeEndedReason } from "../api";
import { navigate } from "../router";
import { ErrorNotice, PageHeading } from "../ui";

/** Sign in with email, password and organization (POST /auth/login). */
export function LoginPage(props: { org?: string; next?: string; note?: string }) {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [org, setOrg] = useState(props.org ?? "");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [ended] = useState(takeEndedReason);

  async function submit(event: Event) {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      const orgSlug = org.trim();
      const res = await api<{ accessToken: string }>("POST", "/auth/login", { email: email.trim(), password, orgSlug });
      saveSession({ token: res.accessToken, org: orgSlug, email: email.trim() });
      navigate(props.next?.startsWith("/") && !props.next.startsWith("//") ? props.next : "/incidents", { replace: true });
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <main id="main" class="login">
      <form class="card login-card" onSubmit={submit} aria-describedby={ended || props.note ? "login-note" : undefined}>
        <PageHeading title="Sign in">
          <span class="brand-mark" aria-hidden="true" /> warroom
        </PageHeading>
        {ended || props.note ? (
          <p id="login-note" class="notice" role="status">
            {ended || props.note}
          </p>
        ) : null}
        <label for="login-email">Email</label>
        <input id="login-email" type="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        <label for="login-password">Password</label>
        <input
          id="login-password"
          type="password"
          autoComplete="current-password"
          required
          value={password}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
        <label for="login-org">Organization</label>
        <input
          id="login-org"
          autoComplete="organization"
          required
          pattern="[a-z0-9][a-z0-9\-]*"
          title="The organization's short name, e.g. acme"
          value={org}
          onInput={(e) => setOrg(e.currentTarget.value)}
        />
        <ErrorNotice error={error} />
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

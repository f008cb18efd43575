import { useState } from "preact/hooks";
import { api, loadSession, type Member, orgPath } from "../api";
import { askConfirm, ErrorNotice, PageHeading, useAction, useLoad, ListTable } from "../ui";

const ROLES = ["member", "admin", "owner"] as const;
const RANK: Record<string, number> = { member: 1, admin: 2, owner: 3 };

/**
 * Whether the signed-in person may change `target`: admins and owners may, an owner only by an
 * owner. The service decides; this only hides controls that would be refused.
 */
function mayManage(me: string | undefined, target: Member): boolean {
  if (me !== "owner" && me !== "admin") return false;
  return target.role !== "owner" || me === "owner";
}

/** Sets one member's password: the form a row opens. Their sessions end. */
function SetPassword(props: { member: Member; onDone(): void }) {
  const [password, setPassword] = useState("");
  const action = useAction();
  const id = `password-${props.member.id}`;
  async function submit(event: Event) {
    event.preventDefault();
    const done = await action.run(async () => {
      await api("PUT", orgPath(`/members/${encodeURIComponent(props.member.id)}/password`), { password });
      return true;
    });
    if (done) props.onDone();
  }
  return (
    <form class="inline-form" onSubmit={submit}>
      <label for={id}>{`New password for ${props.member.email}`}</label>
      <input id={id} type="password" autoComplete="new-password" minLength={8} required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
      <button type="submit" disabled={action.busy}>
        Save password
      </button>
      <p class="hint">Their sessions end; they sign in with the new password.</p>
      <ErrorNotice error={action.error} />
    </form>
  );
}

/** The members page: who belongs to the organization, invitations, roles, removal and passwords. */
export function MembersPage() {
  const session = loadSession();
  const list = useLoad(() => api<{ members: Member[] }>("GET", orgPath("/members")).then((r) => r.members), []);
  const change = useAction();
  const invite = useAction();
  const own = useAction();
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [role, setRole] = useState("member");
  const [settingFor, setSettingFor] = useState<string | null>(null);
  const [notice, setNotice] = useState("");
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");

  const members = list.data ?? [];
  const me = members.find((m) => m.email.toLowerCase() === (session?.email ?? "").toLowerCase())?.role;
  const admin = me === "owner" || me === "admin";

  async function setRoleOf(member: Member, to: string) {
    setNotice("");
    const changed = await change.run(() => api<Member>("PATCH", orgPath(`/members/${encodeURIComponent(member.id)}`), { role: to }));
    if (changed) setNotice(`${member.email} is now ${changed.role}.`);
    list.reload();
  }

  async function remove(member: Member) {
    const ok = await askConfirm({
      title: `Remove ${member.email}?`,
      message: "Their sessions and API keys stop working at once.",
      confirmLabel: "Remove",
      danger: true,
    });
    if (!ok) return;
    setNotice("");
    const done = await change.run(async () => {
      await api("DELETE", orgPath(`/members/${encodeURIComponent(member.id)}`));
      return true;
    });
    if (done) setNotice(`${member.email} was removed.`);
    list.reload();
  }

  async function submitInvite(event: Event) {
    event.preventDefault();
    const added = await invite.run(() => api<Member>("POST", orgPath("/members"), { email: email.trim(), password, role }));
    if (added) {
      setNotice(`${added.email} was added as ${added.role}. Give them the password through a channel you trust.`);
      setEmail("");
      setPassword("");
      setRole("member");
      list.reload();
    }
  }

  async function submitOwn(event: Event) {
    event.preventDefault();
    const done = await own.run(async () => {
      await api("PUT", orgPath("/me/password"), { currentPassword: current, newPassword: next });
      return true;
    });
    if (done) {
      setCurrent("");
      setNext("");
      setNotice("Your password was changed. Your other sessions have ended.");
    }
  }

  return (
    <>
      <PageHeading title="Members">Members</PageHeading>
      <ErrorNotice error={list.error || change.error} />
      {notice ? (
        <p class="notice notice-ok" role="status">
          {notice}
        </p>
      ) : null}
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : (
        <ListTable class="members" caption="Members of the organization" columns={["Email", "Role"]} actions>
          {members.map((m) => (
            <tr key={m.id} data-member={m.email}>
              <td data-label="Email">{m.email}</td>
              <td data-label="Role">
                {mayManage(me, m) ? (
                  <select aria-label={`Role of ${m.email}`} value={m.role} disabled={change.busy} onChange={(e) => void setRoleOf(m, e.currentTarget.value)}>
                    {ROLES.filter((r) => RANK[r]! <= RANK[me ?? "member"]!).map((r) => (
                      <option key={r} value={r}>
                        {r}
                      </option>
                    ))}
                  </select>
                ) : (
                  m.role
                )}
              </td>
              <td data-label="Actions" class="row-actions">
                {mayManage(me, m) ? (
                  <>
                    <button
                      type="button"
                      class="secondary"
                      aria-label={`Set password of ${m.email}`}
                      onClick={() => setSettingFor(settingFor === m.id ? null : m.id)}
                    >
                      Set password
                    </button>
                    <button type="button" class="danger" aria-label={`Remove ${m.email}`} disabled={change.busy} onClick={() => void remove(m)}>
                      Remove
                    </button>
                    {settingFor === m.id ? (
                      <SetPassword
                        member={m}
                        onDone={() => {
                          setSettingFor(null);
                          setNotice(`The password of ${m.email} was set; their sessions have ended.`);
                        }}
                      />
                    ) : null}
                  </>
                ) : null}
              </td>
            </tr>
          ))}
        </ListTable>
      )}

      {admin ? (
        <form class="card" onSubmit={submitInvite} aria-labelledby="invite-heading">
          <h2 id="invite-heading">Add a member</h2>
          <label for="invite-email">Email</label>
          <input id="invite-email" type="email" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
          <label for="invite-password">Initial password</label>
          <input
            id="invite-password"
            type="password"
            autoComplete="new-password"
            minLength={8}
            required
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
          <label for="invite-role">Role</label>
          <select id="invite-role" value={role} onChange={(e) => setRole(e.currentTarget.value)}>
            {ROLES.filter((r) => RANK[r]! <= RANK[me ?? "member"]!).map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
          <ErrorNotice error={invite.error} />
          <button type="submit" disabled={invite.busy}>
            Add member
          </button>
        </form>
      ) : null}

      <form class="card" onSubmit={submitOwn} aria-labelledby="own-heading">
        <h2 id="own-heading">Change your password</h2>
        <label for="own-current">Current password</label>
        <input id="own-current" type="password" autoComplete="current-password" required value={current} onInput={(e) => setCurrent(e.currentTarget.value)} />
        <label for="own-new">New password</label>
        <input id="own-new" type="password" autoComplete="new-password" minLength={8} required value={next} onInput={(e) => setNext(e.currentTarget.value)} />
        <ErrorNotice error={own.error} />
        <button type="submit" disabled={own.busy}>
          Change password
        </button>
      </form>
    </>
  );
}

import { useState } from "preact/hooks";
import { type ApiKey, api, orgPath } from "../api";
import { Ago, askConfirm, ErrorNotice, OnceSecret, PageHeading, useAction, useLoad, useNow, ListTable } from "../ui";

/**
 * The API keys page: the signed-in person's keys (every member's for admins and owners), a form to
 * create one, shown once, and revocation.
 */
export function ApiKeysPage() {
  const now = useNow();
  const list = useLoad(() => api<{ apiKeys: ApiKey[] }>("GET", orgPath("/api-keys")).then((r) => r.apiKeys), []);
  const create = useAction();
  const revoke = useAction();
  const [name, setName] = useState("");
  const [created, setCreated] = useState<{ id: string; key: string; name: string } | null>(null);

  async function submit(event: Event) {
    event.preventDefault();
    const answer = await create.run(() => api<{ id: string; key: string }>("POST", orgPath("/api-keys"), { name: name.trim() }));
    if (answer) {
      setCreated({ ...answer, name: name.trim() || "api key" });
      setName("");
      list.reload();
    }
  }

  async function remove(key: ApiKey) {
    const ok = await askConfirm({
      title: `Revoke the API key "${key.name}"?`,
      message: `The key of ${key.email}: anything using it is refused from its next request.`,
      confirmLabel: "Revoke",
      danger: true,
    });
    if (!ok) return;
    await revoke.run(async () => {
      await api("DELETE", orgPath(`/api-keys/${encodeURIComponent(key.id)}`));
      if (created?.id === key.id) setCreated(null);
      list.reload();
    });
  }

  const keys = list.data ?? [];
  return (
    <>
      <PageHeading title="API keys">API keys</PageHeading>
      <p class="muted">A personal API key acts as you, with your role. Admins and owners see and revoke every member's keys.</p>
      <ErrorNotice error={list.error || revoke.error} />
      {list.loading && !list.data ? (
        <p class="muted">Loading…</p>
      ) : keys.length === 0 ? (
        <p class="empty">No API keys.</p>
      ) : (
        <ListTable class="api-keys" caption="API keys, newest first" columns={["Name", "Owner", "Created", "Last used"]} actions>
          {keys.map((k) => (
            <tr key={k.id} data-key={k.id}>
              <td data-label="Name">{k.name}</td>
              <td data-label="Owner">{k.email}</td>
              <td data-label="Created">
                <Ago at={k.createdAt} now={now} />
              </td>
              <td data-label="Last used">
                <Ago at={k.lastUsedAt} now={now} />
              </td>
              <td data-label="Actions" class="row-actions">
                <button type="button" class="danger" aria-label={`Revoke ${k.name} of ${k.email}`} disabled={revoke.busy} onClick={() => void remove(k)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </ListTable>
      )}

      <form class="card" onSubmit={submit} aria-labelledby="key-heading">
        <h2 id="key-heading">Create an API key</h2>
        <label for="key-name">Name</label>
        <input id="key-name" maxLength={100} placeholder="ci deploy job" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        <ErrorNotice error={create.error} />
        <button type="submit" disabled={create.busy}>
          Create key
        </button>
        {created ? <OnceSecret label={`API key "${created.name}"`} value={created.key} id="new-api-key" /> : null}
      </form>
    </>
  );
}

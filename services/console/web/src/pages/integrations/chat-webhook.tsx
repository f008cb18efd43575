import { useState } from "preact/hooks";
import { api, orgPath } from "../../api";
import { askConfirm, ErrorNotice, useAction, useLoad } from "../../ui";

export function ChatWebhook() {
  const connection = useLoad(() => api<{ name: string; connected: boolean }>("GET", orgPath("/integrations/chatwebhook/connections/default")), []);
  const [url, setUrl] = useState("");
  const [test, setTest] = useState<{ ok: boolean; error: string | null } | undefined>(undefined);
  const action = useAction();
  const path = orgPath("/integrations/chatwebhook/connections/default");

  async function save(event: Event) {
    event.preventDefault();
    await action.run(async () => {
      await api("PUT", path, { webhookUrl: url.trim() });
      setUrl("");
      setTest(undefined);
      connection.reload();
    });
  }

  async function runTest() {
    setTest(undefined);
    await action.run(async () => setTest(await api<{ ok: boolean; error: string | null }>("POST", `${path}/test`)));
  }

  async function remove() {
    const ok = await askConfirm({
      title: "Remove the chat-webhook connection?",
      message: "Approved updates then have nowhere to go until a new one is saved.",
      confirmLabel: "Remove",
      danger: true,
    });
    if (!ok) return;
    await action.run(async () => {
      await api("DELETE", path);
      setTest(undefined);
      connection.reload();
    });
  }

  const connected = connection.data?.connected ?? false;
  return (
    <section aria-labelledby="chatwebhook-heading" class="card">
      <h2 id="chatwebhook-heading">Chat webhook</h2>
      <p>
        Status:{" "}
        <strong class={connected ? "ok-text" : "muted"} id="chatwebhook-status">
          {connection.loading ? "checking…" : connected ? "connected" : "not connected"}
        </strong>
      </p>
      <p class="muted">The incoming-webhook URL of your team-chat channel. It is a secret: it is stored encrypted and never shown again.</p>
      <form onSubmit={save} class="inline-form">
        <label for="chatwebhook-url">{connected ? "Replace the webhook URL" : "Webhook URL"}</label>
        <div class="secret-row">
          <input
            id="chatwebhook-url"
            type="password"
            inputMode="url"
            autoComplete="off"
            spellcheck={false}
            placeholder="https://…"
            required
            value={url}
            onInput={(e) => setUrl(e.currentTarget.value)}
          />
          <button type="submit" disabled={action.busy || !url.trim()}>
            Save
          </button>
        </div>
      </form>
      <div class="actions">
        <button type="button" class="secondary" onClick={runTest} disabled={action.busy || !connected}>
          Test connection
        </button>
        <button type="button" class="danger" onClick={remove} disabled={action.busy || !connected}>
          Remove
        </button>
      </div>
      <ErrorNotice error={action.error || connection.error} />
      {test ? (
        <p class={`notice ${test.ok ? "notice-ok" : "notice-error"}`} role="status" id="chatwebhook-test-result">
          {test.ok ? "Test message posted: check the channel." : `Test failed: ${test.error ?? "the channel refused the post"}`}
        </p>
      ) : null}
    </section>
  );
}

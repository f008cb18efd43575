import { useState } from "preact/hooks";
import { api, orgPath } from "../../api";
import { alertmanagerAuthorizationBlock, alertmanagerHeadersBlock, chatCurl, datadogPayload, heartbeatCurl } from "../../snippets";
import { askConfirm, ErrorNotice, OnceSecret, Snippet, useAction } from "../../ui";

// Each credential issued here stays on screen until the person dismisses it, beside the others
// issued in this tab: issuing the alert-router secret after the ingest token must not hide the
// token, which is already live at the source and can never be shown again. They live in memory
// only (never in storage), so they survive moving between pages but not a reload.

type IssuedKind = "ingest" | "alertrouter" | "chat";
interface Issued {
  kind: IssuedKind;
  value: string;
  /** When it was issued, to tell two of the same session apart. */
  at: string;
}

const ISSUED_NAMES: Record<IssuedKind, string> = { ingest: "ingest token", alertrouter: "alert-router secret", chat: "chat secret" };
let issuedInTab: Issued[] = [];

function IssuedCredential(props: { issued: Issued; org: string; origin: string; onDismiss(): void }) {
  const { issued, origin } = props;
  const label = ISSUED_NAMES[issued.kind];
  return (
    <section class="issued" data-issued={issued.kind} aria-labelledby={`issued-${issued.kind}-heading`}>
      <div class="issued-head">
        <h3 id={`issued-${issued.kind}-heading`}>
          New {label} <span class="muted">(issued {new Date(issued.at).toLocaleTimeString()})</span>
        </h3>
        <button type="button" class="secondary small" onClick={props.onDismiss} aria-label={`Dismiss the ${label}`}>
          Dismiss
        </button>
      </div>
      <OnceSecret id={`issued-${issued.kind}`} label={label[0]!.toUpperCase() + label.slice(1)} value={issued.value} />
      {issued.kind === "ingest" ? (
        <>
          <p>
            Metrics monitor (Datadog webhooks integration): URL <code>{`${origin}/triggers`}</code>, custom headers and payload below. A <code>service:</code>{" "}
            tag names the affected service.
          </p>
          <Snippet
            id="snippet-datadog-headers"
            title="Datadog webhook: custom headers"
            text={JSON.stringify({ Authorization: `Bearer ${issued.value}` }, null, 2)}
          />
          <Snippet id="snippet-datadog-body" title="Datadog webhook: payload" text={datadogPayload()} />
          <Snippet id="snippet-heartbeat" title="Heartbeat ping (end of your job)" text={heartbeatCurl(origin, props.org, issued.value)} />
        </>
      ) : null}
      {issued.kind === "alertrouter" ? (
        <>
          <Snippet
            id="snippet-alertmanager-authorization"
            title="Alertmanager (any version, 0.25 included): receiver with authorization"
            text={alertmanagerAuthorizationBlock(origin, issued.value)}
          />
          <Snippet
            id="snippet-alertmanager"
            title="Alertmanager (0.28.0 or later): receiver with http_headers"
            text={alertmanagerHeadersBlock(origin, issued.value)}
          />
        </>
      ) : null}
      {issued.kind === "chat" ? <Snippet id="snippet-chat" title="Chat workflow: the call it makes" text={chatCurl(origin, props.org, issued.value)} /> : null}
    </section>
  );
}

export function Credentials(props: { org: string }) {
  const origin = location.origin;
  const [issued, setIssuedState] = useState<Issued[]>(issuedInTab);
  const action = useAction();
  const setIssued = (next: Issued[]) => {
    issuedInTab = next;
    setIssuedState(next);
  };

  async function issue(kind: IssuedKind) {
    const ok = await askConfirm({
      title: `Issue a new ${ISSUED_NAMES[kind]}?`,
      message: "It replaces the current one at once; senders still using the old one are refused.",
      confirmLabel: "Issue",
    });
    if (!ok) return;
    await action.run(async () => {
      const value =
        kind === "ingest"
          ? (await api<{ token: string }>("POST", orgPath("/triggers/ingest-token"))).token
          : (await api<{ secret: string }>("POST", orgPath(kind === "chat" ? "/triggers/chat-secret" : "/triggers/alertrouter-secret"))).secret;
      // A second one of the same kind replaces the first, which the service no longer accepts.
      setIssued([...issuedInTab.filter((i) => i.kind !== kind), { kind, value, at: new Date().toISOString() }]);
    });
  }

  return (
    <section aria-labelledby="credentials-heading" class="card">
      <h2 id="credentials-heading">Trigger credentials</h2>
      <p class="muted">
        Each is 64 hexadecimal characters, shown once, and replaces the previous one at once. The ingest token serves every monitor on{" "}
        <code>POST /triggers</code> and every heartbeat ping. What you issue stays here until you dismiss it.
      </p>
      <div class="actions">
        <button type="button" onClick={() => issue("ingest")} disabled={action.busy}>
          Issue ingest token
        </button>
        <button type="button" onClick={() => issue("alertrouter")} disabled={action.busy}>
          Issue alert-router secret
        </button>
        <button type="button" onClick={() => issue("chat")} disabled={action.busy}>
          Issue chat secret
        </button>
      </div>
      <ErrorNotice error={action.error} />
      <div aria-live="polite">
        {issued.map((i) => (
          <IssuedCredential key={i.kind} issued={i} org={props.org} origin={origin} onDismiss={() => setIssued(issuedInTab.filter((x) => x !== i))} />
        ))}
      </div>
    </section>
  );
}

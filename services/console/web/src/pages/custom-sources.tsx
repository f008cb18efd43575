import { useState } from "preact/hooks";
import { api, errorText, orgPath } from "../api";
import { Link, navigate } from "../router";
import { Ago, ColumnHeads, ErrorNotice, OnceSecret, PageHeading, useAction, useLoad, useNow } from "../ui";

// Custom sources: a tool we do not parse gets its own URL, credential and CEL rules. This page
// creates one from a preset or blank, edits its rules (with the save-time errors next to the rule
// they name), previews a recent or pasted payload, and shows the delivery log and last payloads.

/** A rule's fields as the API names them; every one but `name` is a CEL expression. */
const RULE_FIELDS = [
  { key: "when", label: "When", hint: "a bool; empty: always" },
  { key: "kind", label: "Kind", hint: "'trigger', 'recovery', 'no_data' or 'ignore'" },
  { key: "title", label: "Title", hint: "a string" },
  { key: "severity", label: "Severity", hint: "'sev1' … 'sev4'; empty: sev3" },
  { key: "attachKey", label: "Attach key", hint: "a string; same key, same open incident" },
  { key: "eventId", label: "Event id", hint: "a string; a redelivery is recorded once" },
  { key: "entity", label: "Entity", hint: "{'kind': …, 'id': …}" },
  { key: "summary", label: "Summary", hint: "a string" },
  { key: "link", label: "Link", hint: "an http(s) URL" },
  { key: "runbookUrl", label: "Runbook URL", hint: "an http(s) URL" },
  { key: "ignoreReason", label: "Ignore reason", hint: "a string, for kind 'ignore'" },
] as const;

type RuleField = "name" | (typeof RULE_FIELDS)[number]["key"];
type Rule = Record<RuleField, string>;

interface CustomSource {
  id: string;
  name: string;
  badge: string;
  rules: Rule[];
  auth: AuthOptions | null;
  url: string;
  credentialState: string;
  credentialIssuedAt: string | null;
  createdAt: string | null;
  preset: string;
}

interface Credential {
  secret: string;
  url: string;
  pathUrl: string | null;
}

interface Signature {
  header: string;
  algorithm: string;
  prefix: string;
  encoding: string;
  timestampHeader: string;
  toleranceSeconds: number;
  signedContent: string;
  idHeader: string;
}

interface AuthOptions {
  secretInPath: boolean;
  basicAuth: boolean;
  secretHeader?: string;
  signature?: Signature | null;
}

interface Preset {
  name: string;
  description: string;
  rules: Rule[];
  auth?: AuthOptions | null;
}

/** How the sender proves it holds the secret, besides Authorization: Bearer (always accepted). */
type ProofMode = "bearer" | "header" | "signature";

const NO_SIGNATURE: Signature = {
  header: "",
  algorithm: "sha256",
  prefix: "",
  encoding: "hex",
  timestampHeader: "",
  toleranceSeconds: 300,
  signedContent: "body",
  idHeader: "",
};

interface Delivery {
  id: string;
  at: string | null;
  outcome: string;
  incidentId: string | null;
  rule: string | null;
  error: string | null;
  warnings: string[];
  reason: string | null;
}

interface Payload {
  id: string;
  receivedAt: string | null;
  body: unknown;
  headers: Record<string, string>;
  query: Record<string, string>;
  truncated: boolean;
}

interface Preview {
  matchedRule: string | null;
  rules: { rule: string; matched: boolean; reason: string }[];
  fields: Record<string, string | null> | null;
  error: string | null;
  warnings: string[];
  would: string;
  incidentId: string | null;
  attachIdentity: string;
}

function blankRule(): Rule {
  return {
    name: "",
    when: "",
    kind: "",
    title: "",
    severity: "",
    attachKey: "",
    eventId: "",
    entity: "",
    summary: "",
    link: "",
    runbookUrl: "",
    ignoreReason: "",
  };
}

function fullRule(rule: Partial<Rule>): Rule {
  return { ...blankRule(), ...Object.fromEntries(Object.entries(rule).map(([k, v]) => [k, v ?? ""])) };
}

/** `rules[2].title: does not compile: …` → the rule, the field and the message, to show next to it. */
export function ruleError(message: string): { index: number; field: string; text: string } | undefined {
  const match = /^rules\[(\d+)\]\.(\w+): (.*)$/s.exec(message);
  if (!match) return undefined;
  return { index: Number(match[1]), field: match[2]!, text: match[3]! };
}

function incidentHref(org: string, id: string): string {
  return `/o/${encodeURIComponent(org)}/incidents/${encodeURIComponent(id)}`;
}

/** The page: the sources, a form to add one, and the selected source's editor. */
export function CustomSourcesPage(props: { org: string; selected: string | undefined }) {
  const list = useLoad(() => api<{ customSources: CustomSource[] }>("GET", orgPath("/custom-sources")).then((r) => r.customSources), []);
  const [created, setCreated] = useState<{ name: string; credential: Credential } | undefined>(undefined);
  const sources = list.data ?? [];
  const selected = sources.find((s) => s.id === props.selected);
  return (
    <>
      <PageHeading title="Custom sources">Custom sources</PageHeading>
      <p class="muted">
        <Link href="/integrations">Integrations</Link> · A tool we do not parse posts to its own URL with its own credential; rules in CEL turn its body into an
        alert. A rule that fails never loses the alert: it opens <em>Unmapped alert from &lt;name&gt;</em> with the raw payload.
      </p>
      <ErrorNotice error={list.error} />
      <section aria-labelledby="sources-heading" class="card">
        <h2 id="sources-heading">Sources</h2>
        {list.loading ? (
          <p class="muted">Loading…</p>
        ) : sources.length === 0 ? (
          <p class="empty">No custom sources yet.</p>
        ) : (
          <ul class="sources" id="custom-source-list">
            {sources.map((s) => (
              <li key={s.id}>
                <Link href={`/custom-sources?id=${encodeURIComponent(s.id)}`} aria-current={s.id === props.selected ? "page" : undefined}>
                  {s.name}
                </Link>{" "}
                <span class={`badge credential-${s.credentialState}`}>{s.credentialState}</span>{" "}
                <span class="muted">{`${s.rules.length} rule${s.rules.length === 1 ? "" : "s"}${s.preset ? ` · from ${s.preset}` : ""}`}</span>
              </li>
            ))}
          </ul>
        )}
        <CreateSource
          onCreated={(source, credential) => {
            setCreated({ name: source.name, credential });
            list.reload();
            navigate(`/custom-sources?id=${encodeURIComponent(source.id)}`);
          }}
        />
      </section>
      {created && selected?.name === created.name ? <CredentialShown id="new-credential" credential={created.credential} /> : null}
      {selected ? <SourceEditor key={selected.id} org={props.org} source={selected} onChanged={list.reload} /> : null}
      {props.selected && !list.loading && !selected && !list.error ? <p class="notice notice-error">No such custom source: it may have been deleted.</p> : null}
    </>
  );
}

function CredentialShown(props: { id: string; credential: Credential }) {
  return (
    <section aria-labelledby={`${props.id}-heading`} class="card issued" aria-live="polite">
      <h2 id={`${props.id}-heading`}>Credential</h2>
      <OnceSecret id={props.id} label="Secret (send it as Authorization: Bearer)" value={props.credential.secret} />
      <p>
        URL: <code id={`${props.id}-url`}>{props.credential.url}</code>
      </p>
      {props.credential.pathUrl ? (
        <p>
          URL with the secret in its path: <code>{props.credential.pathUrl}</code>{" "}
          <span class="muted">(the URL is then the secret: it ends up in the tool's settings and access logs)</span>
        </p>
      ) : null}
    </section>
  );
}

/** A labelled text input; `onInput` gets the new value. */
function TextField(props: { id: string; label: string; value: string; onInput(value: string): void; placeholder?: string; required?: boolean }) {
  return (
    <div>
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        required={props.required}
        placeholder={props.placeholder}
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
      />
    </div>
  );
}

/** How a tool signs its deliveries: the header, the algorithm and what is signed. */
function SignatureFields(props: { signature: Signature; onChange<K extends keyof Signature>(field: K, value: Signature[K]): void }) {
  const { signature, onChange: setSignatureField } = props;
  return (
    <fieldset class="grid-2">
      <legend>Signature</legend>
      <TextField
        id="cs-sig-header"
        label="Signature header"
        required
        placeholder="x-hub-signature-256"
        value={signature.header}
        onInput={(v) => setSignatureField("header", v)}
      />
      <div>
        <label for="cs-sig-algorithm">Algorithm</label>
        <select id="cs-sig-algorithm" value={signature.algorithm} onChange={(e) => setSignatureField("algorithm", e.currentTarget.value)}>
          <option value="sha256">sha256</option>
          <option value="sha1">sha1</option>
          <option value="sha512">sha512</option>
        </select>
      </div>
      <TextField id="cs-sig-prefix" label="Prefix" placeholder="sha256=" value={signature.prefix} onInput={(v) => setSignatureField("prefix", v)} />
      <div>
        <label for="cs-sig-encoding">Encoding</label>
        <select id="cs-sig-encoding" value={signature.encoding} onChange={(e) => setSignatureField("encoding", e.currentTarget.value)}>
          <option value="hex">hex</option>
          <option value="base64">base64</option>
        </select>
      </div>
      <TextField
        id="cs-sig-timestamp"
        label="Timestamp header (optional)"
        placeholder="webhook-timestamp"
        value={signature.timestampHeader}
        onInput={(v) => setSignatureField("timestampHeader", v)}
      />
      <div>
        <label for="cs-sig-tolerance">Tolerance (seconds)</label>
        <input
          id="cs-sig-tolerance"
          type="number"
          min={1}
          max={86400}
          value={signature.toleranceSeconds}
          onInput={(e) => setSignatureField("toleranceSeconds", Number(e.currentTarget.value))}
        />
      </div>
      <div>
        <label for="cs-sig-signed">What is signed</label>
        <select id="cs-sig-signed" value={signature.signedContent} onChange={(e) => setSignatureField("signedContent", e.currentTarget.value)}>
          <option value="body">The body</option>
          <option value="id.timestamp.body">id.timestamp.body (Standard Webhooks)</option>
        </select>
      </div>
      {signature.signedContent === "id.timestamp.body" ? (
        <TextField
          id="cs-sig-id"
          label="Message id header"
          required
          placeholder="webhook-id"
          value={signature.idHeader}
          onInput={(v) => setSignatureField("idHeader", v)}
        />
      ) : null}
    </fieldset>
  );
}

function CreateSource(props: { onCreated(source: CustomSource, credential: Credential): void }) {
  const presets = useLoad(() => api<{ presets: Preset[] }>("GET", orgPath("/custom-source-presets")).then((r) => r.presets), []);
  const [name, setName] = useState("");
  const [preset, setPreset] = useState("");
  const [secretInPath, setSecretInPath] = useState(false);
  const [basicAuth, setBasicAuth] = useState(false);
  const [mode, setMode] = useState<ProofMode>("bearer");
  const [secretHeader, setSecretHeader] = useState("");
  const [signature, setSignature] = useState<Signature>(NO_SIGNATURE);
  const [senderSecret, setSenderSecret] = useState("");
  const create = useAction();
  const description = presets.data?.find((p) => p.name === preset)?.description;

  /** A preset brings its tool's way of sending the credential; the fields start from it. */
  function choosePreset(chosen: string) {
    setPreset(chosen);
    const auth = presets.data?.find((p) => p.name === chosen)?.auth;
    setSecretInPath(auth?.secretInPath ?? false);
    setBasicAuth(auth?.basicAuth ?? false);
    setSecretHeader(auth?.secretHeader ?? "");
    setSignature(auth?.signature ? { ...NO_SIGNATURE, ...auth.signature } : NO_SIGNATURE);
    setMode(auth?.signature ? "signature" : auth?.secretHeader ? "header" : "bearer");
  }

  function setSignatureField<K extends keyof Signature>(field: K, value: Signature[K]) {
    setSignature((current) => ({ ...current, [field]: value }));
  }

  async function submit(event: Event) {
    event.preventDefault();
    const auth: AuthOptions = {
      secretInPath,
      basicAuth,
      ...(mode === "header" ? { secretHeader: secretHeader.trim() } : {}),
      ...(mode === "signature" ? { signature } : {}),
    };
    const start = preset ? { preset } : { rules: [{ name: "every alert", title: `'Alert from ${name.trim().replace(/'/g, "")}'` }] };
    const body = { name: name.trim(), ...start, auth, ...(senderSecret.trim() ? { secret: senderSecret.trim() } : {}) };
    const res = await create.run(() => api<{ source: CustomSource; credential: Credential }>("POST", orgPath("/custom-sources"), body));
    if (res) {
      setName("");
      choosePreset("");
      setSenderSecret("");
      props.onCreated(res.source, res.credential);
    }
  }

  return (
    <details class="add">
      <summary>Add a custom source</summary>
      <form onSubmit={submit} class="grid-2">
        <div>
          <label for="cs-name">Name (the badge on its incidents)</label>
          <input id="cs-name" required pattern="[a-z0-9][a-z0-9-]*" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </div>
        <div>
          <label for="cs-preset">Start from</label>
          <select id="cs-preset" value={preset} onChange={(e) => choosePreset(e.currentTarget.value)}>
            <option value="">Blank (one rule to edit)</option>
            {(presets.data ?? []).map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
          {description ? <p class="hint">{description}</p> : null}
        </div>
        <div>
          <label for="cs-proof">How the tool sends its credential (Authorization: Bearer always works)</label>
          <select id="cs-proof" value={mode} onChange={(e) => setMode(e.currentTarget.value as ProofMode)}>
            <option value="bearer">Authorization: Bearer only</option>
            <option value="header">The secret in a header of its own</option>
            <option value="signature">A signature of the body (HMAC)</option>
          </select>
        </div>
        <div>
          <label for="cs-sender-secret">The tool's own secret (optional)</label>
          <input id="cs-sender-secret" type="password" autocomplete="off" value={senderSecret} onInput={(e) => setSenderSecret(e.currentTarget.value)} />
          <p class="hint">For tools that make their own (Sentry's client secret, a whsec_ secret); empty: one is issued.</p>
        </div>
        {mode === "header" ? (
          <TextField
            id="cs-secret-header"
            label="Header holding the secret"
            required
            placeholder="x-gitlab-token"
            value={secretHeader}
            onInput={setSecretHeader}
          />
        ) : null}
        {mode === "signature" ? <SignatureFields signature={signature} onChange={setSignatureField} /> : null}
        <div class="switch-row">
          <input id="cs-path" type="checkbox" checked={secretInPath} onChange={(e) => setSecretInPath(e.currentTarget.checked)} />
          <label for="cs-path">Accept the secret in the URL path (for tools that can only set a URL)</label>
        </div>
        <div class="switch-row">
          <input id="cs-basic" type="checkbox" checked={basicAuth} onChange={(e) => setBasicAuth(e.currentTarget.checked)} />
          <label for="cs-basic">Accept HTTP Basic auth (the secret as the password)</label>
        </div>
        <div class="form-end">
          <ErrorNotice error={create.error || presets.error} />
          <button type="submit" disabled={create.busy || !name.trim()}>
            Create source
          </button>
        </div>
      </form>
    </details>
  );
}

function SourceEditor(props: { org: string; source: CustomSource; onChanged(): void }) {
  const source = props.source;
  const [rules, setRules] = useState<Rule[]>(() => source.rules.map(fullRule));
  const [saveError, setSaveError] = useState("");
  const [saved, setSaved] = useState(false);
  const save = useAction();
  const problem = ruleError(saveError);

  function setField(index: number, field: RuleField, value: string) {
    setSaved(false);
    setRules((all) => all.map((r, i) => (i === index ? { ...r, [field]: value } : r)));
  }

  async function submit(event: Event) {
    event.preventDefault();
    setSaveError("");
    setSaved(false);
    try {
      await api("PATCH", orgPath(`/custom-sources/${encodeURIComponent(source.id)}`), { rules });
      setSaved(true);
      props.onChanged();
    } catch (err) {
      setSaveError(errorText(err));
    }
  }

  return (
    <>
      <section aria-labelledby="editor-heading" class="card">
        <h2 id="editor-heading">{`Rules of ${source.name}`}</h2>
        <p class="muted">
          Posts go to <code id="source-url">{source.url}</code>. Rules are tried in order; the first whose <em>when</em> is true maps the delivery. Each field
          is CEL over <code>body</code>, <code>headers</code>, <code>query</code> and <code>receivedAt</code>.
        </p>
        <form onSubmit={submit}>
          <ol class="rules">
            {rules.map((rule, index) => (
              <li key={index} class="rule" data-rule-index={index}>
                <fieldset>
                  <legend>{`Rule ${index + 1}${rule.name ? `: ${rule.name}` : ""}`}</legend>
                  <div class="grid-2">
                    <div>
                      <label for={`rule-${index}-name`}>Name</label>
                      <input id={`rule-${index}-name`} value={rule.name} onInput={(e) => setField(index, "name", e.currentTarget.value)} />
                    </div>
                    {RULE_FIELDS.map((f) => (
                      <div key={f.key}>
                        <label for={`rule-${index}-${f.key}`}>{f.label}</label>
                        <input
                          id={`rule-${index}-${f.key}`}
                          class="mono"
                          spellcheck={false}
                          placeholder={f.hint}
                          aria-invalid={problem?.index === index && problem.field === f.key ? "true" : undefined}
                          aria-describedby={problem?.index === index && problem.field === f.key ? `rule-${index}-error` : undefined}
                          value={rule[f.key]}
                          onInput={(e) => setField(index, f.key, e.currentTarget.value)}
                        />
                      </div>
                    ))}
                  </div>
                  {problem?.index === index ? (
                    <p class="notice notice-error rule-error" role="alert" id={`rule-${index}-error`}>
                      {`${RULE_FIELDS.find((f) => f.key === problem.field)?.label ?? problem.field}: ${problem.text}`}
                    </p>
                  ) : null}
                  <div class="actions">
                    <button
                      type="button"
                      class="secondary"
                      disabled={index === 0}
                      onClick={() => setRules((all) => all.map((r, i) => (i === index - 1 ? all[index]! : i === index ? all[index - 1]! : r)))}
                    >
                      {`Move rule ${index + 1} up`}
                    </button>
                    <button type="button" class="danger" disabled={rules.length === 1} onClick={() => setRules((all) => all.filter((_, i) => i !== index))}>
                      {`Remove rule ${index + 1}`}
                    </button>
                  </div>
                </fieldset>
              </li>
            ))}
          </ol>
          <div class="actions">
            <button type="button" class="secondary" disabled={rules.length >= 20} onClick={() => setRules((all) => [...all, blankRule()])}>
              Add rule
            </button>
            <button type="submit" disabled={save.busy}>
              Save rules
            </button>
          </div>
          {saveError && !problem ? <ErrorNotice error={saveError} /> : null}
          {saved ? (
            <p class="notice notice-ok" role="status" id="rules-saved">
              Rules saved and compiled.
            </p>
          ) : null}
        </form>
      </section>
      <PreviewPanel org={props.org} source={source} rules={rules} />
      <CredentialPanel source={source} onChanged={props.onChanged} />
      <DeliveryLog org={props.org} source={source} />
    </>
  );
}

function PreviewPanel(props: { org: string; source: CustomSource; rules: Rule[] }) {
  const payloads = useLoad(
    () => api<{ payloads: Payload[] }>("GET", orgPath(`/custom-sources/${encodeURIComponent(props.source.id)}/payloads`)).then((r) => r.payloads),
    [props.source.id],
  );
  const now = useNow();
  const [pasted, setPasted] = useState("");
  const [payloadId, setPayloadId] = useState("");
  const [result, setResult] = useState<Preview | undefined>(undefined);
  const run = useAction();

  async function preview(event: Event) {
    event.preventDefault();
    setResult(undefined);
    await run.run(async () => {
      let request: Record<string, unknown>;
      if (payloadId) request = { payloadId, rules: props.rules };
      else {
        let body: unknown;
        try {
          body = JSON.parse(pasted);
        } catch {
          throw new Error("The pasted payload is not JSON: paste the body your tool sends, or pick a recent payload.");
        }
        request = { body, rules: props.rules };
      }
      setResult(await api<Preview>("POST", orgPath(`/custom-sources/${encodeURIComponent(props.source.id)}/preview`), request));
    });
  }

  const kept = payloads.data ?? [];
  const fields = result?.fields;
  return (
    <>
      <section aria-labelledby="preview-heading" class="card">
        <h2 id="preview-heading">Preview</h2>
        <p class="muted">Maps a payload with the rules above, saved or not, and says where it would land. Nothing is recorded.</p>
        <form onSubmit={preview} class="grid-2">
          <div>
            <label for="preview-payload">Recent payload</label>
            <select id="preview-payload" value={payloadId} onChange={(e) => setPayloadId(e.currentTarget.value)}>
              <option value="">Paste one instead</option>
              {kept.map((p) => (
                <option key={p.id} value={p.id}>
                  {`${p.receivedAt ? new Date(p.receivedAt).toLocaleString() : p.id}: ${JSON.stringify(p.body).slice(0, 60)}`}
                </option>
              ))}
            </select>
          </div>
          <div>
            <label for="preview-body">Pasted payload (JSON)</label>
            <textarea
              id="preview-body"
              class="mono"
              rows={6}
              spellcheck={false}
              disabled={payloadId !== ""}
              value={pasted}
              onInput={(e) => setPasted(e.currentTarget.value)}
            />
          </div>
          <div class="form-end">
            <ErrorNotice error={run.error} />
            <button type="submit" disabled={run.busy || (!payloadId && !pasted.trim())}>
              Preview
            </button>
          </div>
        </form>
        {result ? (
          <div id="preview-result" aria-live="polite">
            <p class={`notice ${result.error ? "notice-error" : "notice-ok"}`} role="status" id="preview-would">
              {result.error
                ? `The mapping fails: ${result.error}. The delivery would open or repeat on "Unmapped alert from ${props.source.name}" with the raw payload.`
                : `Would be ${result.would}${result.matchedRule ? ` by rule "${result.matchedRule}"` : ""}.`}{" "}
              {result.incidentId ? <Link href={incidentHref(props.org, result.incidentId)}>the open incident it would attach to</Link> : null}
            </p>
            {result.warnings.map((w) => (
              <p class="notice notice-warning" key={w}>
                {w}
              </p>
            ))}
            <table class="list" id="preview-verdicts">
              <caption>Each rule</caption>
              <ColumnHeads columns={["Rule", "Verdict", "Why"]} />
              <tbody>
                {result.rules.map((v) => (
                  <tr key={v.rule} data-rule={v.rule}>
                    <td data-label="Rule">{v.rule}</td>
                    <td data-label="Verdict">
                      <span class={`badge ${v.matched ? "pass" : "fail"}`}>{v.matched ? "matched" : "no match"}</span>
                    </td>
                    <td data-label="Why">{v.reason}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {fields && !result.error ? (
              <table class="list" id="preview-fields">
                <caption>Mapped fields</caption>
                <tbody>
                  {Object.entries(fields)
                    .filter(([, v]) => v !== null && v !== "")
                    .map(([k, v]) => (
                      <tr key={k} data-field={k}>
                        <th scope="row">{k}</th>
                        <td class="mono">{String(v)}</td>
                      </tr>
                    ))}
                  <tr data-field="attachIdentity">
                    <th scope="row">attach identity</th>
                    <td class="mono">{result.attachIdentity || "none: opens its own incident"}</td>
                  </tr>
                </tbody>
              </table>
            ) : null}
          </div>
        ) : null}
      </section>
      <section aria-labelledby="payloads-heading" class="card">
        <h2 id="payloads-heading">Last payloads</h2>
        <p class="muted">The last 50 bodies as they arrived, credential headers redacted. Admins only.</p>
        <ErrorNotice error={payloads.error} />
        <div class="actions">
          <button type="button" class="secondary" onClick={payloads.reload}>
            Refresh payloads
          </button>
        </div>
        {kept.length === 0 ? (
          <p class="empty">No payloads yet: send one to the source's URL.</p>
        ) : (
          <ul class="payloads" id="payload-list">
            {kept.map((p) => (
              <li key={p.id}>
                <details>
                  <summary>
                    <Ago at={p.receivedAt} now={now} />
                    {p.truncated ? " · cut to its first 64 KiB" : ""}
                  </summary>
                  <pre class="mono">{JSON.stringify({ body: p.body, headers: p.headers, query: p.query }, null, 2)}</pre>
                </details>
                <button type="button" class="secondary" onClick={() => setPayloadId(p.id)}>
                  Use in preview
                </button>
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}

/** Rotate or revoke the credential, after a confirmation on the page itself. */
function CredentialPanel(props: { source: CustomSource; onChanged(): void }) {
  const [asking, setAsking] = useState<"rotate" | "revoke" | undefined>(undefined);
  const [issued, setIssued] = useState<Credential | undefined>(undefined);
  const [done, setDone] = useState("");
  const action = useAction();
  const path = orgPath(`/custom-sources/${encodeURIComponent(props.source.id)}/credential`);

  async function confirm() {
    const what = asking;
    setAsking(undefined);
    setDone("");
    await action.run(async () => {
      if (what === "rotate") {
        setIssued(await api<Credential>("POST", path));
        setDone("A new credential is issued; the previous one no longer works.");
      } else {
        await api("DELETE", path);
        setIssued(undefined);
        setDone("The credential is revoked: every delivery is refused until you issue a new one.");
      }
      props.onChanged();
    });
  }

  return (
    <section aria-labelledby="credential-heading" class="card">
      <h2 id="credential-heading">Credential</h2>
      <p>
        State: <strong id="credential-state">{props.source.credentialState}</strong>
        {props.source.credentialIssuedAt ? <span class="muted">{` · issued ${new Date(props.source.credentialIssuedAt).toLocaleString()}`}</span> : null}
      </p>
      <div class="actions">
        <button type="button" onClick={() => setAsking("rotate")} disabled={action.busy || asking !== undefined}>
          {props.source.credentialState === "revoked" ? "Issue a new credential" : "Rotate credential"}
        </button>
        <button
          type="button"
          class="danger"
          onClick={() => setAsking("revoke")}
          disabled={action.busy || asking !== undefined || props.source.credentialState === "revoked"}
        >
          Revoke credential
        </button>
      </div>
      {asking ? (
        <div class="notice notice-warning confirm" role="alertdialog" aria-labelledby="credential-confirm-text" id="credential-confirm">
          <p id="credential-confirm-text">
            {asking === "rotate"
              ? `Issue a new credential for ${props.source.name}? The current one stops working at once: the tool must be given the new one.`
              : `Revoke the credential of ${props.source.name}? Every delivery is refused until a new one is issued.`}
          </p>
          <div class="actions">
            <button type="button" class={asking === "revoke" ? "danger" : undefined} onClick={confirm}>
              {asking === "rotate" ? "Yes, rotate" : "Yes, revoke"}
            </button>
            <button type="button" class="secondary" onClick={() => setAsking(undefined)}>
              Cancel
            </button>
          </div>
        </div>
      ) : null}
      <ErrorNotice error={action.error} />
      {done ? (
        <p class="notice notice-ok" role="status" id="credential-done">
          {done}
        </p>
      ) : null}
      {issued ? <CredentialShown id="rotated-credential" credential={issued} /> : null}
    </section>
  );
}

function DeliveryLog(props: { org: string; source: CustomSource }) {
  const now = useNow();
  const log = useLoad(
    () => api<{ deliveries: Delivery[] }>("GET", orgPath(`/custom-sources/${encodeURIComponent(props.source.id)}/deliveries`)).then((r) => r.deliveries),
    [props.source.id],
  );
  const rows = log.data ?? [];
  return (
    <section aria-labelledby="log-heading" class="card">
      <h2 id="log-heading">Delivery log</h2>
      <ErrorNotice error={log.error} />
      <div class="actions">
        <button type="button" class="secondary" onClick={log.reload}>
          Refresh log
        </button>
      </div>
      {rows.length === 0 ? (
        <p class="empty">No deliveries yet.</p>
      ) : (
        <table class="list" id="delivery-log">
          <caption class="sr-only">{`Deliveries to ${props.source.name}, newest first`}</caption>
          <ColumnHeads columns={["When", "Outcome", "Incident", "Rule or error"]} />
          <tbody>
            {rows.map((d) => (
              <tr key={d.id} data-outcome={d.outcome}>
                <td data-label="When">
                  <Ago at={d.at} now={now} />
                </td>
                <td data-label="Outcome">{d.outcome}</td>
                <td data-label="Incident">{d.incidentId ? <Link href={incidentHref(props.org, d.incidentId)}>open</Link> : "—"}</td>
                <td data-label="Rule or error">
                  {d.error ? <span class="error-text">{d.error}</span> : d.rule ? `rule "${d.rule}"` : (d.reason ?? "—")}
                  {d.warnings.map((w) => (
                    <div class="muted" key={w}>
                      {`warning: ${w}`}
                    </div>
                  ))}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

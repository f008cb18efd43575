import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { errorText } from "./api";
import { ago, agoShort, exact, until, type Time } from "./format";
import { hasNavigated } from "./router";

/** Re-renders every `ms` so relative times stay true. */
export function useNow(ms = 15_000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

export interface Loaded<T> {
  data: T | undefined;
  error: string;
  loading: boolean;
  reload(): void;
}

/**
 * Reads once on mount and again on reload(); a reload while one is in flight is queued, so a
 * burst of live events costs at most two reads.
 */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState("");
  const [loading, setLoading] = useState(true);
  const state = useRef({ running: false, again: false, alive: true, generation: 0 });
  const loadRef = useRef(load);
  loadRef.current = load;

  const run = useCallback(async () => {
    const s = state.current;
    if (s.running) {
      s.again = true;
      return;
    }
    s.running = true;
    const generation = s.generation;
    try {
      do {
        s.again = false;
        try {
          const value = await loadRef.current();
          if (!s.alive || generation !== s.generation) return;
          setData(value);
          setError("");
        } catch (err) {
          if (!s.alive || generation !== s.generation) return;
          setError(errorText(err));
        }
      } while (s.again);
    } finally {
      if (generation === s.generation) {
        s.running = false;
        setLoading(false);
      }
    }
  }, []);

  useEffect(() => {
    const s = state.current;
    s.alive = true;
    s.generation++;
    s.running = false;
    s.again = false;
    setLoading(true);
    setData(undefined);
    void run();
    return () => {
      s.alive = false;
    };
  }, deps);

  return { data, error, loading, reload: run };
}

let pageTitle = "warroom";
let titleCount = "";

function renderTitle(): void {
  document.title = `${titleCount ? `(${titleCount}) ` : ""}${pageTitle}`;
}

/** Puts the count of open unacknowledged incidents before the tab's title (none when zero). */
export function setTitleCount(count: number, more: "" | "+"): void {
  titleCount = count > 0 ? `${count}${more}` : "";
  renderTitle();
}

/** The page's main heading; it takes focus after an in-app navigation (for screen readers). */
export function PageHeading(props: { children: ComponentChildren; title: string }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    pageTitle = `${props.title} · warroom`;
    renderTitle();
    if (hasNavigated()) ref.current?.focus();
  }, [props.title]);
  return (
    <h1 ref={ref} tabIndex={-1}>
      {props.children}
    </h1>
  );
}

/**
 * A list page's table: a caption for screen readers (or the heading it is labelled by), a heading
 * per column, and the rows. `actions` adds a last column for the row's buttons, named for screen
 * readers only.
 */
export function ListTable(props: { class: string; caption?: string; labelledBy?: string; columns: string[]; actions?: boolean; children: ComponentChildren }) {
  return (
    <table class={`list ${props.class}`} aria-labelledby={props.labelledBy}>
      {props.caption ? <caption class="sr-only">{props.caption}</caption> : null}
      <ColumnHeads columns={props.columns} actions={props.actions} />
      <tbody>{props.children}</tbody>
    </table>
  );
}

/** A table's heading row: one heading per column; `actions` adds a last one named for screen readers only. */
export function ColumnHeads(props: { columns: string[]; actions?: boolean }) {
  return (
    <thead>
      <tr>
        {props.columns.map((column) => (
          <th key={column} scope="col">
            {column}
          </th>
        ))}
        {props.actions ? (
          <th scope="col">
            <span class="sr-only">Actions</span>
          </th>
        ) : null}
      </tr>
    </thead>
  );
}

/** An error message announced to screen readers, or nothing when there is none. */
export function ErrorNotice(props: { error: string }) {
  if (!props.error) return null;
  return (
    <p class="notice notice-error" role="alert">
      {props.error}
    </p>
  );
}

/** The badge of an incident's source. */
export function SourceBadge(props: { source: string }) {
  return <span class={`badge source source-${props.source.replace(/[^a-z-]/g, "")}`}>{props.source || "unknown"}</span>;
}

/** The badge of a severity: the delivery's proposal until a person sets it. */
export function Severity(props: { severity: string }) {
  const sev = /^sev[1-4]$/.test(props.severity) ? props.severity : "unknown";
  return (
    <span class={`badge sev sev-${sev}`} title="Severity">
      {props.severity ? props.severity.toUpperCase() : "—"}
    </span>
  );
}

/** The badge of an incident's state. */
export function StateBadge(props: { state: string }) {
  return <span class={`badge state state-${props.state.replace(/[^a-z_]/g, "")}`}>{props.state.replace("_", " ")}</span>;
}

/** A time shown as how long ago it was (in its largest unit when `short`), the exact time on hover. */
export function Ago(props: { at: string | null; now: number; empty?: string; short?: boolean }) {
  if (!props.at) return <span class="muted">{props.empty ?? "never"}</span>;
  return (
    <time dateTime={props.at ?? undefined} title={exact(props.at)}>
      {props.short ? agoShort(props.at, props.now) : ago(props.at, props.now)}
    </time>
  );
}

/** A time shown as how long until it (or how overdue it is), the exact time on hover. */
export function Until(props: { at: Time; now: number }) {
  const overdue = props.at !== null && Date.parse(props.at) < props.now;
  return (
    <time dateTime={props.at ?? undefined} title={exact(props.at)} class={overdue ? "overdue" : undefined}>
      {until(props.at, props.now)}
    </time>
  );
}

async function copyText(text: string, fallbackFrom?: HTMLElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Without a secure context the clipboard API is missing: select the text for Ctrl+C instead.
    if (fallbackFrom instanceof HTMLInputElement || fallbackFrom instanceof HTMLTextAreaElement) {
      fallbackFrom.select();
      return document.execCommand("copy");
    }
    return false;
  }
}

/**
 * A button that copies `text` to the clipboard (or selects the target for Ctrl+C without one) and
 * says whether it worked.
 */
export function CopyButton(props: { text: string; label: string; target?: () => HTMLElement | null }) {
  const [status, setStatus] = useState("");
  return (
    <span class="copy">
      <button
        type="button"
        class="secondary"
        onClick={async () => {
          const ok = await copyText(props.text, props.target?.());
          setStatus(ok ? "Copied" : "Select the text and copy it");
          setTimeout(() => setStatus(""), 2500);
        }}
      >
        {props.label}
      </button>
      <span class="copy-status" role="status" aria-live="polite">
        {status}
      </span>
    </span>
  );
}

/** A credential shown once: read-only, selectable, with a copy button. */
export function OnceSecret(props: { label: string; value: string; id: string }) {
  const ref = useRef<HTMLInputElement>(null);
  return (
    <div class="secret">
      <label for={props.id}>{props.label}</label>
      <div class="secret-row">
        <input
          id={props.id}
          ref={ref}
          class="mono"
          readOnly
          value={props.value}
          spellcheck={false}
          autoComplete="off"
          onFocus={(e) => e.currentTarget.select()}
        />
        <CopyButton text={props.value} label="Copy" target={() => ref.current} />
      </div>
      <p class="hint">Shown once. Store it in your secret manager now: the service keeps only a hash and cannot show it again.</p>
    </div>
  );
}

/** A titled, read-only text block with a copy button. */
export function Snippet(props: { title: string; text: string; id: string }) {
  const ref = useRef<HTMLTextAreaElement>(null);
  return (
    <div class="snippet">
      <div class="snippet-head">
        <label for={props.id}>{props.title}</label>
        <CopyButton text={props.text} label="Copy snippet" target={() => ref.current} />
      </div>
      <textarea id={props.id} ref={ref} class="mono" readOnly rows={Math.min(18, props.text.split("\n").length + 1)} spellcheck={false} value={props.text} />
    </div>
  );
}

/** Runs an action, tracking busy and error state for its button. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const run = useCallback(async <T,>(action: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError("");
    try {
      return await action();
    } catch (err) {
      setError(errorText(err));
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, setError, run };
}

/** Accessible tabs: arrow keys move between tabs, the panel is labelled by its tab. */
export function Tabs(props: {
  label: string;
  tabs: { id: string; label: string }[];
  selected: string;
  onSelect(id: string): void;
  children: ComponentChildren;
}) {
  const refs = useRef<Record<string, HTMLButtonElement | null>>({});
  const ids = props.tabs.map((t) => t.id);
  const move = (delta: number) => {
    const index = (ids.indexOf(props.selected) + delta + ids.length) % ids.length;
    const id = ids[index]!;
    props.onSelect(id);
    refs.current[id]?.focus();
  };
  return (
    <div class="tabs">
      <div role="tablist" aria-label={props.label}>
        {props.tabs.map((tab) => (
          <button
            key={tab.id}
            type="button"
            role="tab"
            id={`tab-${tab.id}`}
            aria-selected={tab.id === props.selected}
            aria-controls={`panel-${tab.id}`}
            tabIndex={tab.id === props.selected ? 0 : -1}
            ref={(el) => {
              refs.current[tab.id] = el;
            }}
            onClick={() => props.onSelect(tab.id)}
            onKeyDown={(e) => {
              if (e.key === "ArrowRight") move(1);
              else if (e.key === "ArrowLeft") move(-1);
              else if (e.key === "Home") move(-ids.indexOf(props.selected));
              else if (e.key === "End") move(ids.length - 1 - ids.indexOf(props.selected));
              else return;
              e.preventDefault();
            }}
          >
            {tab.label}
          </button>
        ))}
      </div>
      {/* biome-ignore lint/a11y/noNoninteractiveTabindex: the ARIA tabs pattern makes a tab panel focusable so a keyboard reaches content without a focusable element. */}
      <div role="tabpanel" id={`panel-${props.selected}`} aria-labelledby={`tab-${props.selected}`} tabIndex={0}>
        {props.children}
      </div>
    </div>
  );
}

export interface ConfirmOptions {
  /** The dialog's title: the question. */
  title: string;
  /** What happens if the person goes ahead. */
  message: string;
  /** The confirming button's label, a verb ("Remove", "Issue"). */
  confirmLabel: string;
  /** Styles the confirming button as destructive. */
  danger?: boolean;
}

interface PendingConfirm extends ConfirmOptions {
  resolve(ok: boolean): void;
}

let showConfirm: ((pending: PendingConfirm) => void) | undefined;

/**
 * Asks the person to confirm in an in-app dialog (see ConfirmHost); resolves true when they
 * confirm, false when they cancel (the Cancel button, Esc, or a click outside).
 */
export function askConfirm(options: ConfirmOptions): Promise<boolean> {
  return new Promise((resolve) => {
    if (!showConfirm) {
      resolve(false);
      return;
    }
    showConfirm({ ...options, resolve });
  });
}

const FOCUSABLE = 'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';

/**
 * A modal dialog on the native <dialog> element: the rest of the page is inert while it is open,
 * Tab and Shift+Tab stay inside it, Esc cancels, and focus returns to what had it before. The
 * element named by `initialFocus` (else the first focusable one) takes focus on opening.
 */
export function Dialog(props: { open: boolean; title: string; onCancel(): void; children: ComponentChildren; describedBy?: string; initialFocus?: string }) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useRef(`dialog-${Math.random().toString(36).slice(2, 9)}`).current;
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog || !props.open) return;
    const previous = document.activeElement as HTMLElement | null;
    if (!dialog.open) dialog.showModal();
    const first = (props.initialFocus ? dialog.querySelector<HTMLElement>(props.initialFocus) : null) ?? dialog.querySelector<HTMLElement>(FOCUSABLE);
    first?.focus();
    return () => {
      if (dialog.open) dialog.close();
      previous?.focus?.();
    };
  }, [props.open]);
  if (!props.open) return null;
  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby={titleId}
      aria-describedby={props.describedBy}
      onCancel={(e) => {
        e.preventDefault();
        props.onCancel();
      }}
      onClick={(e) => {
        // A click on the backdrop (the dialog element itself, outside its content) cancels.
        if (e.target === ref.current) props.onCancel();
      }}
      onKeyDown={(e) => {
        if (e.key !== "Tab") return;
        const items = [...(ref.current?.querySelectorAll<HTMLElement>(FOCUSABLE) ?? [])];
        if (items.length === 0) return;
        const first = items[0]!;
        const last = items[items.length - 1]!;
        if (e.shiftKey && document.activeElement === first) {
          last.focus();
          e.preventDefault();
        } else if (!e.shiftKey && document.activeElement === last) {
          first.focus();
          e.preventDefault();
        }
      }}
    >
      <div class="dialog-body">
        <h2 id={titleId}>{props.title}</h2>
        {props.children}
      </div>
    </dialog>
  );
}

/**
 * Renders the confirmations askConfirm() asks for; mounted once. Enter confirms (the confirming
 * button has focus), Esc cancels.
 */
export function ConfirmHost() {
  const [pending, setPending] = useState<PendingConfirm | undefined>(undefined);
  useEffect(() => {
    showConfirm = (next) =>
      setPending((current) => {
        current?.resolve(false);
        return next;
      });
    return () => {
      showConfirm = undefined;
    };
  }, []);
  const finish = (ok: boolean) => {
    pending?.resolve(ok);
    setPending(undefined);
  };
  return (
    <Dialog open={pending !== undefined} title={pending?.title ?? ""} onCancel={() => finish(false)} describedBy="confirm-message" initialFocus=".confirm-go">
      <p id="confirm-message">{pending?.message}</p>
      <div class="dialog-actions">
        <button type="button" class="secondary" onClick={() => finish(false)}>
          Cancel
        </button>
        <button type="button" class={`confirm-go ${pending?.danger ? "danger" : ""}`} onClick={() => finish(true)}>
          {pending?.confirmLabel}
        </button>
      </div>
    </Dialog>
  );
}

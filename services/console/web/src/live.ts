import { useEffect, useRef, useState } from "preact/hooks";
import { clearSession, type Session } from "./api";

// Live updates: the server-sent event stream GET /o/{org}/events, read with fetch so the session
// token travels in the Authorization header like on every other call (EventSource cannot send
// headers, and a token in a URL ends up in access logs and browser history). An event says what
// changed; views read the current state again through the REST API. After a reconnect the
// stream sends `ready` again and every view reads again, so nothing missed while offline stays
// missing.

export interface LiveEvent {
  /** ready, incident.opened, incident.timeline_recorded, incident.resolved, incident.severity_changed, update.sent. */
  type: string;
  data: Record<string, unknown>;
}

export type LiveState = "connecting" | "live" | "offline";

type Listener = (event: LiveEvent) => void;
const listeners = new Set<Listener>();
const stateListeners = new Set<(state: LiveState) => void>();
let currentState: LiveState = "connecting";
/** When the stream last brought anything (an event, or `ready`), in ms since the epoch. */
let lastUpdateAt: number | undefined;
/** How many times the stream came back after being lost: views key on it to read everything again. */
let comebacks = 0;
let wasOffline = false;

function setState(state: LiveState): void {
  if (state === "offline") wasOffline = true;
  if (state === "live" && wasOffline) {
    wasOffline = false;
    comebacks++;
  }
  currentState = state;
  for (const listener of stateListeners) listener(state);
}

function emit(event: LiveEvent): void {
  for (const listener of listeners) listener(event);
}

/** Parses complete `\n\n`-separated frames off the front of `buffer`; returns what is left. */
export function parseFrames(buffer: string, onFrame: (event: string, data: string) => void): string {
  let rest = buffer.replace(/\r\n?/g, "\n");
  for (;;) {
    const end = rest.indexOf("\n\n");
    if (end < 0) return rest;
    const frame = rest.slice(0, end);
    rest = rest.slice(end + 2);
    let event = "message";
    const data: string[] = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length > 0) onFrame(event, data.join("\n"));
  }
}

/** Keeps one stream open for the session, reconnecting with backoff; returns a stop function. */
export function startLive(session: Session): () => void {
  let stopped = false;
  let controller: AbortController | undefined;
  let attempt = 0;

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  async function run(): Promise<void> {
    while (!stopped) {
      controller = new AbortController();
      setState("connecting");
      try {
        const res = await fetch(`/o/${encodeURIComponent(session.org)}/events`, {
          headers: { authorization: `Bearer ${session.token}`, accept: "text/event-stream" },
          signal: controller.signal,
          cache: "no-store",
        });
        if (res.status === 401) {
          clearSession("Your session has ended. Sign in again.");
          return;
        }
        if (!res.ok || !res.body) throw new Error(`stream answered ${res.status}`);
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer = parseFrames(buffer + value, (event, data) => {
            let parsed: Record<string, unknown> = {};
            try {
              parsed = JSON.parse(data) as Record<string, unknown>;
            } catch {
              return;
            }
            lastUpdateAt = Date.now();
            if (event === "ready") {
              attempt = 0;
              setState("live");
            }
            if (event === "unauthorized") {
              stopped = true;
              clearSession("Your session has ended. Sign in again.");
              return;
            }
            emit({ type: event, data: parsed });
          });
        }
      } catch {
        // Dropped or refused: reconnect below.
      }
      if (stopped) return;
      setState("offline");
      attempt++;
      const delay = Math.min(30_000, 1000 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2);
      await sleep(delay);
    }
  }

  // Offline at once when the browser knows the network is gone, and a new try when it is back,
  // instead of waiting out the backoff.
  const goneOffline = () => controller?.abort();
  window.addEventListener("offline", goneOffline);
  void run();
  return () => {
    stopped = true;
    window.removeEventListener("offline", goneOffline);
    controller?.abort();
    wasOffline = false;
    setState("connecting");
  };
}

/** Calls `handler` for every live event while the component is mounted. */
export function useLiveEvents(handler: (event: LiveEvent) => void): void {
  const ref = useRef(handler);
  ref.current = handler;
  useEffect(() => {
    const listener: Listener = (event) => ref.current(event);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }, []);
}

/**
 * The live event stream's state (connecting, live or offline), kept current while the component is
 * mounted.
 */
export function useLiveState(): LiveState {
  const [state, setLocal] = useState(currentState);
  useEffect(() => {
    stateListeners.add(setLocal);
    setLocal(currentState);
    return () => {
      stateListeners.delete(setLocal);
    };
  }, []);
  return state;
}

export interface LiveStatus {
  state: LiveState;
  /** When the stream last brought anything; undefined before the first frame. */
  lastUpdateAt: number | undefined;
  /** Grows by one each time the stream comes back after being lost. */
  comebacks: number;
}

/** The stream's state with the time of its last update and how many times it came back. */
export function useLiveStatus(): LiveStatus {
  const state = useLiveState();
  return { state, lastUpdateAt, comebacks };
}

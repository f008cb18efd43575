/** Test-only: reads a server-sent event stream over fetch and waits for frames. */

export interface Frame {
  id?: string;
  event: string;
  data: string;
}

export interface OpenStream {
  status: number;
  headers: Headers;
  /** The error body when the stream was refused. */
  body: unknown;
  frames: Frame[];
  /** Resolves when the server ended the stream. */
  ended: Promise<void>;
  /** The first frame (already received or still to come) that `match` accepts. */
  next(match: (frame: Frame) => boolean, timeoutMs?: number): Promise<Frame>;
  close(): void;
}

/**
 * Opens a server-sent event stream at `url` and collects its frames; resolves once the answer's
 * head arrives, with the status, the frames so far and a way to wait for the next one.
 */
export async function openEventStream(url: string, headers: Record<string, string> = {}): Promise<OpenStream> {
  const controller = new AbortController();
  const res = await fetch(url, { headers: { accept: "text/event-stream", ...headers }, signal: controller.signal });
  const frames: Frame[] = [];
  const waiters = new Set<() => void>();
  let endedResolve!: () => void;
  const ended = new Promise<void>((resolve) => (endedResolve = resolve));
  if (!res.ok || !res.body) {
    const text = await res.text();
    endedResolve();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // Kept as text.
    }
    return {
      status: res.status,
      headers: res.headers,
      body,
      frames,
      ended,
      next: () => Promise.reject(new Error(`stream refused: ${res.status}`)),
      close() {},
    };
  }
  let done = false;
  void (async () => {
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const raw = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const frame: Frame = { event: "message", data: "" };
          const data: string[] = [];
          for (const line of raw.split("\n")) {
            if (line.startsWith(":")) continue;
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") frame.event = value;
            else if (field === "id") frame.id = value;
            else if (field === "data") data.push(value);
          }
          if (data.length === 0) continue;
          frame.data = data.join("\n");
          frames.push(frame);
          for (const wake of waiters) wake();
        }
      }
    } catch {
      // Aborted by close() or cut by the server.
    } finally {
      done = true;
      endedResolve();
      for (const wake of waiters) wake();
    }
  })();
  return {
    status: res.status,
    headers: res.headers,
    body: null,
    frames,
    ended,
    next(match, timeoutMs = 5_000) {
      return new Promise<Frame>((resolve, reject) => {
        const check = () => {
          const found = frames.find(match);
          if (found) {
            cleanup();
            resolve(found);
          } else if (done) {
            cleanup();
            reject(new Error(`stream ended without the frame; got ${frames.map((f) => f.event).join(", ")}`));
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`no matching frame within ${timeoutMs} ms; got ${frames.map((f) => f.event).join(", ")}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    close() {
      controller.abort();
    },
  };
}

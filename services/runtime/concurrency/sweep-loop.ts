/** A sweep run on a timer: start() begins, stop() ends and waits for a sweep in progress. */
export interface SweepLoop {
  /** Sweeps every `intervalSeconds`, the first one at once. */
  start(intervalSeconds: number): void;
  stop(): Promise<void>;
}

/**
 * Runs `sweep` every `intervalSeconds`, measured from one sweep's start to the next (a sweep that
 * takes longer than the interval is followed at once, never overlapped). A sweep that throws is
 * handed to `onError` and the loop goes on: the next sweep retries. The timer does not keep the
 * process alive.
 */
export function createSweepLoop(sweep: () => Promise<unknown>, onError: (err: unknown) => void): SweepLoop {
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> | undefined;
  let stopped = true;

  function schedule(intervalSeconds: number, delayMs: number): void {
    if (stopped) return;
    timer = setTimeout(() => {
      const started = Date.now();
      current = sweep()
        .catch(onError)
        .finally(() => {
          current = undefined;
          schedule(intervalSeconds, Math.max(0, intervalSeconds * 1000 - (Date.now() - started)));
        });
    }, delayMs);
    timer.unref();
  }

  return {
    start(intervalSeconds) {
      stopped = false;
      schedule(intervalSeconds, 0);
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await current;
    },
  };
}

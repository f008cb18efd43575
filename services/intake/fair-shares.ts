/**
 * Fair shares of a process's delivery capacity. Each organization has at most `perOrg` deliveries
 * in flight in this process; beyond that its deliveries wait in its own queue (first come, first
 * served), each up to `waitMs` or its own deadline, whichever is sooner, and are then refused with
 * a "try again" answer. Another organization never waits in that queue: its deliveries take their
 * own share at once. Over every organization, at most `total` are in flight and `maxWaiting` wait;
 * past those the process is overloaded and refuses at once, early, instead of answering late.
 *
 * The shares are work-conserving: an organization alone in the process (no other one has anything
 * in flight or waiting) may borrow beyond its share, up to `total - perOrg`. Most installations
 * run one organization, and the delivery path groups concurrent deliveries into shared statements,
 * so a hard cap of `perOrg` cost a lone organization about a third of its throughput. The last
 * `perOrg` slots stay free for the next organization to arrive, which therefore never waits for
 * the borrower; from then on the borrower is held to its share until the other is gone again.
 *
 * Nothing is kept for an organization with nothing in flight and nothing waiting, so the memory
 * is bounded by `total + maxWaiting` whatever the number of organizations.
 */
export interface FairSharesOptions {
  /** Deliveries of one organization in flight in this process. */
  perOrg: number;
  /** Deliveries in flight in this process, over every organization. */
  total: number;
  /** How long a delivery may wait for its organization's share (or the total). */
  waitMs: number;
  /** Deliveries waiting in this process, over every organization. */
  maxWaiting: number;
}

/**
 * Why a delivery was refused: its organization's share stayed full, the process is overloaded, or
 * the organization spent its budget of large bodies (large-body-budget.ts).
 */
export type ShareRefusal = "share" | "overload" | "large-bodies";

const REFUSALS: Record<ShareRefusal, string> = {
  share: "this organization has too many deliveries in flight",
  overload: "this process has too many deliveries in flight",
  "large-bodies": "this organization's bodies over 64 KiB are queued past the wait at its budget",
};

export class ShareExceeded extends Error {
  constructor(
    readonly refusal: ShareRefusal,
    /** Seconds the sender should wait before sending again. */
    readonly retryAfterSeconds: number,
  ) {
    super(REFUSALS[refusal]);
    this.name = "ShareExceeded";
  }
}

interface Waiter {
  orgId: string;
  grant: () => void;
  refuse: (error: ShareExceeded) => void;
}

interface OrgState {
  active: number;
  waiting: Waiter[];
}

export interface FairShares {
  /**
   * Runs `work` within the organization's share: at once if there is room, after a wait in the
   * organization's queue otherwise; throws ShareExceeded when the wait would pass `deadline`
   * (epoch ms) or the limits' wait, or at once when the process is overloaded.
   */
  run<T>(orgId: string, work: () => Promise<T>, options?: { deadline?: number | undefined; signal?: AbortSignal | undefined }): Promise<T>;
  /** What is held now: for metrics and for tests that nothing is left behind. */
  state(): { active: number; waiting: number; organizations: number };
}

export function createFairShares(options: FairSharesOptions): FairShares {
  const orgs = new Map<string, OrgState>();
  let active = 0;
  let waiting = 0;
  /** Organizations with waiters, in the order they are served when the total frees a slot. */
  const retryAfterSeconds = Math.max(1, Math.ceil(options.waitMs / 1000));

  const stateOf = (orgId: string): OrgState => {
    let state = orgs.get(orgId);
    if (!state) {
      state = { active: 0, waiting: [] };
      orgs.set(orgId, state);
    }
    return state;
  };

  const forgetIfIdle = (orgId: string, state: OrgState) => {
    if (state.active === 0 && state.waiting.length === 0) orgs.delete(orgId);
  };

  /** Whether the organization may start one more delivery now: within its share, or borrowing while alone. */
  const mayStart = (state: OrgState): boolean =>
    active < options.total && (state.active < options.perOrg || (orgs.size === 1 && active < options.total - options.perOrg));

  /**
   * Hands freed slots on, as many as may start: to the same organization's next waiter first,
   * then to the organization that has waited longest. A release can free more than one slot's
   * worth, as when the last other organization leaves and a borrower may borrow again.
   */
  function release(orgId: string): void {
    const state = orgs.get(orgId);
    active -= 1;
    if (state) {
      state.active -= 1;
      if (state.waiting.length > 0 && mayStart(state)) {
        state.waiting.shift()!.grant();
        return;
      }
      forgetIfIdle(orgId, state);
    }
    for (let granted = true; granted; ) {
      granted = false;
      for (const [otherId, other] of orgs) {
        if (other.waiting.length > 0 && mayStart(other)) {
          other.waiting.shift()!.grant();
          orgs.delete(otherId);
          orgs.set(otherId, other); // served: to the back of the line
          granted = true;
          break;
        }
      }
    }
  }

  function acquire(orgId: string, deadline: number | undefined, signal: AbortSignal | undefined): Promise<void> | undefined {
    const state = stateOf(orgId);
    if (state.waiting.length === 0 && mayStart(state)) {
      state.active += 1;
      active += 1;
      return undefined;
    }
    const waitUntil = Math.min(Date.now() + options.waitMs, deadline ?? Number.POSITIVE_INFINITY);
    const room = waitUntil - Date.now();
    if (waiting >= options.maxWaiting || room <= 0) {
      forgetIfIdle(orgId, state);
      const overloaded = waiting >= options.maxWaiting || active >= options.total;
      throw new ShareExceeded(overloaded && state.active < options.perOrg ? "overload" : "share", retryAfterSeconds);
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        orgId,
        grant: () => {
          done();
          state.active += 1;
          active += 1;
          resolve();
        },
        refuse: (error) => {
          done();
          const index = state.waiting.indexOf(waiter);
          if (index >= 0) state.waiting.splice(index, 1);
          forgetIfIdle(orgId, state);
          reject(error);
        },
      };
      const timer = setTimeout(
        () => waiter.refuse(new ShareExceeded(active >= options.total && state.active < options.perOrg ? "overload" : "share", retryAfterSeconds)),
        room,
      );
      const onAbort = () => waiter.refuse(new ShareExceeded("share", retryAfterSeconds));
      const done = () => {
        waiting -= 1;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      waiting += 1;
      state.waiting.push(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  return {
    async run(orgId, work, runOptions = {}) {
      const wait = acquire(orgId, runOptions.deadline, runOptions.signal);
      if (wait) await wait;
      try {
        return await work();
      } finally {
        release(orgId);
      }
    },
    state: () => ({ active, waiting, organizations: orgs.size }),
  };
}

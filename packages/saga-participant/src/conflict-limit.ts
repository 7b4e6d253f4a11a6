/**
 * How many transactions of one participant process run at once, adapted
 * to the write conflicts they meet — as the Rust participant kit does
 * (participant-kit/src/mongo/conflict_limit.rs).
 *
 * Why: when many calls write one document (a hot account or product), all
 * but one of their transactions meet a WriteConflict, run again together
 * and conflict again; every conflict costs the server work while the one
 * transaction that could commit waits. So each attempt of a transaction
 * holds a permit of a limit that behaves like TCP's congestion window: it
 * starts at {@link MAX_TRANSACTIONS}, a TransientTransactionError halves it
 * (down to one), and as many commits as the limit (at least
 * {@link COMMITS_TO_RISE}) raise it by one. It orders work and guarantees
 * nothing: the unique index and conditional updates remain the guarantees.
 */
import type { MongoClient } from 'mongodb';

/** The most transactions of one process at once. */
export const MAX_TRANSACTIONS = 64;
/** The fewest commits that raise the limit by one. */
export const COMMITS_TO_RISE = 8;

/** One attempt's permission to run its transaction. */
export interface Permit {
  /** The attempt committed. */
  committed(): void;
  /** The attempt met a write conflict (TransientTransactionError). */
  conflicted(): void;
  /** Gives the permit back (after either of the above, or alone). */
  release(): void;
}

export class ConflictLimit {
  private limitNow: number;
  private running = 0;
  private commits = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly max: number = MAX_TRANSACTIONS) {
    this.max = Math.max(1, Math.floor(max));
    this.limitNow = this.max;
  }

  /** Transactions allowed at once now. */
  get limit(): number {
    return this.limitNow;
  }

  /** Transactions holding a permit now. */
  get inUse(): number {
    return this.running;
  }

  /**
   * Waits for a permit until `until` (ms since the epoch); undefined when
   * none came in time (the caller answers UNAVAILABLE, nothing begun).
   */
  async acquire(until: number = Infinity): Promise<Permit | undefined> {
    while (this.running >= this.limitNow) {
      const left = until - Date.now();
      if (left <= 0) return undefined;
      await new Promise<void>((resolve) => {
        const wake = () => {
          if (timer) clearTimeout(timer);
          resolve();
        };
        // Out of the queue when its time is up, so that a later wake goes
        // to a waiter still waiting.
        const timer = Number.isFinite(left)
          ? setTimeout(() => {
              const at = this.waiting.indexOf(wake);
              if (at >= 0) this.waiting.splice(at, 1);
              resolve();
            }, left)
          : undefined;
        this.waiting.push(wake);
      });
    }
    this.running += 1;
    let released = false;
    return {
      committed: () => {
        this.commits += 1;
        if (this.limitNow < this.max && this.commits >= Math.max(this.limitNow, COMMITS_TO_RISE)) {
          this.commits = 0;
          this.limitNow += 1;
          this.wakeOne();
        }
      },
      conflicted: () => {
        this.limitNow = Math.max(1, Math.floor(this.limitNow / 2));
        this.commits = 0;
      },
      release: () => {
        if (released) return;
        released = true;
        this.running -= 1;
        this.wakeOne();
      },
    };
  }

  private wakeOne(): void {
    // A woken waiter re-checks the limit; waking one per freed slot keeps
    // the order first come, first served.
    this.waiting.shift()?.();
  }
}

const limits = new WeakMap<MongoClient, ConflictLimit>();

/** The limit shared by every transaction on `client`. */
export function conflictLimitOf(client: MongoClient): ConflictLimit {
  let limit = limits.get(client);
  if (!limit) {
    limit = new ConflictLimit();
    limits.set(client, limit);
  }
  return limit;
}

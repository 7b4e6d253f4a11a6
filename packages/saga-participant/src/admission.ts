/**
 * Which calls the participant takes on, and when
 * (docs/participant-protocol.md, "Shed what you cannot answer in time").
 *
 * A participant that keeps working on calls it can no longer answer in
 * time, and starts every retry of them at once besides, multiplies its own
 * load exactly when it is slowest. So at most `maxInFlight` calls work at
 * once (abandoned ones included, until their transaction ends); a call
 * beyond that waits its turn in arrival order, but only while its deadline
 * leaves time (a call without one waits up to `NO_DEADLINE_BUDGET_MS`), and
 * a call whose deadline has passed is never started. Either refusal is
 * UNAVAILABLE (reason OVERLOADED) with nothing done: the contract's "retry
 * later", which the operationHistory makes safe.
 */
import { OVERLOADED, Unavailable } from './errors.js';
import { DEADLINE_MARGIN_MS, NO_DEADLINE_BUDGET_MS } from './transaction.js';

/** Most Act/Compensate calls at work at once, by default. */
export const DEFAULT_MAX_IN_FLIGHT = 32;

interface Waiter {
  admit: () => void;
  timer: NodeJS.Timeout;
}

export class Admission {
  private running = 0;
  private readonly waiting: Waiter[] = [];

  constructor(readonly maxInFlight: number = DEFAULT_MAX_IN_FLIGHT) {}

  /** Calls at work now. */
  get inFlight(): number {
    return this.running;
  }

  /** Calls waiting for their turn now. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Runs `work` for a call due by `deadline` (ms since the epoch, or Infinity), or refuses it. */
  async run<T>(deadline: number, work: () => Promise<T>): Promise<T> {
    const until = Number.isFinite(deadline) ? deadline - DEADLINE_MARGIN_MS : Date.now() + NO_DEADLINE_BUDGET_MS;
    const now = Date.now();
    if (now >= until) {
      throw new Unavailable(
        `the call's deadline passed before it was started (${now - deadline} ms ago); nothing was done`,
        OVERLOADED,
      );
    }
    if (this.running >= this.maxInFlight) await this.turn(until);
    this.running += 1;
    try {
      return await work();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.admit();
    }
  }

  /** Resolves when a place frees up (the caller then takes it), or rejects at `until`. */
  private turn(until: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        admit: () => {
          clearTimeout(waiter.timer);
          resolve();
        },
        timer: setTimeout(() => {
          const at = this.waiting.indexOf(waiter);
          if (at >= 0) this.waiting.splice(at, 1);
          reject(
            new Unavailable(
              `overloaded: ${this.running} calls in flight (maxInFlight) until the call's deadline; nothing was done`,
              OVERLOADED,
            ),
          );
        }, until - Date.now()),
      };
      this.waiting.push(waiter);
    });
  }
}

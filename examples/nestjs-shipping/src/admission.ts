/**
 * Which calls this participant takes on.
 *
 * The orchestrator retries a call that timed out, with the same request id.
 * A participant that keeps working on calls it can no longer answer in time,
 * and takes on every retry of them besides, multiplies its own load exactly
 * when it is slowest: against a MongoDB starved of CPU, 100 sagas' retries
 * piled up until a single transaction took 70 s and every call timed out —
 * the step never completed. So a call is refused UNAVAILABLE at once, with
 * nothing done, when its deadline has already passed (it waited that long to
 * be read) or when `maxInFlight` calls are already running (abandoned ones
 * included, until their transaction ends). UNAVAILABLE is the contract's
 * "retry later"; the orchestrator backs off before it does, and the
 * operationHistory makes the retry safe.
 */
import { Unavailable } from './errors.js';
import { DEADLINE_MARGIN_MS } from './transaction.js';

/** Most Act/Compensate calls at work at once, by default. */
export const DEFAULT_MAX_IN_FLIGHT = 32;

export class Admission {
  private running = 0;

  constructor(readonly maxInFlight: number = DEFAULT_MAX_IN_FLIGHT) {}

  /** Calls in flight now. */
  get inFlight(): number {
    return this.running;
  }

  /** Runs `work` for a call due by `deadline` (ms since the epoch), or refuses it. */
  async run<T>(deadline: number, work: () => Promise<T>): Promise<T> {
    const now = Date.now();
    if (now >= deadline - DEADLINE_MARGIN_MS) {
      throw new Unavailable(`the call's deadline passed before it was started (${now - deadline} ms ago); nothing was done`);
    }
    if (this.running >= this.maxInFlight) {
      throw new Unavailable(`overloaded: ${this.running} calls in flight (SHIPPING_MAX_IN_FLIGHT); nothing was done`);
    }
    this.running += 1;
    try {
      return await work();
    } finally {
      this.running -= 1;
    }
  }
}

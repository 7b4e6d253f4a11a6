/**
 * One local transaction per call, retried on transient errors within the
 * call's deadline, and the unique key as the only arbiter.
 *
 * The driver's `withTransaction` retries for up to 120 s whatever the
 * caller's deadline, so this runs its own loop:
 * - a `TransientTransactionError` (the WriteConflict a second writer of the
 *   same `(request_id, kind)` key gets while the first is uncommitted, a
 *   failover) aborts the attempt and starts the transaction again after an
 *   exponential backoff with full jitter;
 * - an `UnknownTransactionCommitResult` retries the commit itself;
 * - before each new attempt the call's budget is checked: once another
 *   attempt could not end within it, the call gives up with `Unavailable`
 *   (nothing is recorded; the caller's retry with the same request id finds
 *   the record or takes the key).
 *
 * A duplicate-key error (11000) on a history insert means another call
 * *committed* that key: it becomes `KeyTaken`, the transaction is aborted
 * (everything written before it included) and the caller answers from the
 * winner's record.
 */
import type { ClientSession, Collection, MongoClient } from 'mongodb';
import { conflictLimitOf } from './conflict-limit.js';
import { Unavailable, describe, hasLabel, isDuplicateKey } from './errors.js';
import type { Kind, OperationRecord } from './records.js';

/** How long a call without a deadline may spend retrying transient conflicts. */
export const NO_DEADLINE_BUDGET_MS = 4000;
/** Left of the caller's deadline to send the answer in. */
export const DEADLINE_MARGIN_MS = 250;
/** First and longest backoff between two attempts. */
const BACKOFF_BASE_MS = 5;
const BACKOFF_MAX_MS = 500;

/** The `(request_id, kind)` key was already held by a committed record. */
export class KeyTaken extends Error {
  constructor(readonly kind: Kind) {
    super(`${kind} record already exists`);
  }
}

/** When a call due by `deadline` (ms since the epoch, or Infinity) must stop retrying. */
export function budgetEnd(deadline: number): number {
  return Number.isFinite(deadline) ? deadline - DEADLINE_MARGIN_MS : Date.now() + NO_DEADLINE_BUDGET_MS;
}

/** Counts of what `transact` did, for tests and metrics. */
export interface TransactStats {
  attempts: number;
  commitRetries: number;
}

/** Runs `work` in one transaction, retried on transient errors until `until` (ms since the epoch). */
export async function transact<T>(
  client: MongoClient,
  until: number,
  work: (session: ClientSession) => Promise<T>,
  stats: TransactStats = { attempts: 0, commitRetries: 0 },
): Promise<T> {
  const session = client.startSession();
  const limit = conflictLimitOf(client);
  let last: unknown = null;
  try {
    for (;;) {
      if (stats.attempts > 0 && Date.now() >= until) throw gaveUp(stats.attempts, last);
      // Each attempt holds a permit of the process's conflict limit, given
      // back before the backoff (conflict-limit.ts).
      const permit = await limit.acquire(until);
      if (!permit) throw gaveUp(stats.attempts, last ?? 'no transaction slot free before the deadline');
      stats.attempts += 1;
      const started = Date.now();
      let retryWhole: boolean | undefined;
      let result: T | undefined;
      try {
        session.startTransaction({ readConcern: { level: 'snapshot' }, writeConcern: { w: 'majority' } });
        try {
          result = await work(session);
        } catch (error) {
          if (session.inTransaction()) await session.abortTransaction().catch(() => undefined);
          if (!hasLabel(error, 'TransientTransactionError')) throw error;
          last = error;
          retryWhole = true;
        }
        if (retryWhole === undefined) retryWhole = await commit(session, until, stats, (error) => (last = error));
        if (retryWhole) permit.conflicted();
        else permit.committed();
      } finally {
        permit.release();
      }
      if (!retryWhole) return result as T;
      await backoff(stats.attempts, started, until, last);
    }
  } finally {
    await session.endSession().catch(() => undefined);
  }
}

/** Commits; true when the whole transaction must run again (a transient commit failure). */
async function commit(
  session: ClientSession,
  until: number,
  stats: TransactStats,
  remember: (error: unknown) => void,
): Promise<boolean> {
  for (let retry = 0; ; retry += 1) {
    try {
      await session.commitTransaction();
      return false;
    } catch (error) {
      remember(error);
      const code = (error as { code?: unknown }).code;
      if (hasLabel(error, 'UnknownTransactionCommitResult') && code !== 50 && Date.now() < until) {
        stats.commitRetries += 1;
        await sleep(Math.min(jitter(retry + 1), Math.max(0, until - Date.now())));
        continue;
      }
      if (hasLabel(error, 'TransientTransactionError')) return true;
      throw error;
    }
  }
}

/** Sleeps before attempt `attempts + 1`, or gives up when that attempt could not end before `until`. */
async function backoff(attempts: number, started: number, until: number, last: unknown): Promise<void> {
  const delay = jitter(attempts);
  const took = Date.now() - started;
  if (Date.now() + delay + took >= until) throw gaveUp(attempts, last);
  await sleep(delay);
}

/** Exponential backoff with full jitter. */
function jitter(attempt: number): number {
  const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.min(attempt, 16));
  return Math.random() * cap;
}

function gaveUp(attempts: number, last: unknown): Unavailable {
  return new Unavailable(`gave up after ${attempts} attempts within the call's deadline; last: ${describe(last)}`);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Inserts a history record in the transaction; `KeyTaken` when its key is held. */
export async function insertRecord(
  history: Collection<OperationRecord>,
  record: OperationRecord,
  session: ClientSession,
): Promise<void> {
  try {
    await history.insertOne({ ...record }, { session });
  } catch (error) {
    if (isDuplicateKey(error)) throw new KeyTaken(record.kind);
    throw error;
  }
}

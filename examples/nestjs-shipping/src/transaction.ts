/**
 * One local transaction per call, and the unique key as the only arbiter.
 *
 * `session.withTransaction` retries the whole callback on a
 * TransientTransactionError — in particular the WriteConflict a second writer
 * of the same `(request_id, kind)` key gets while the first is uncommitted.
 * Its own limit is 120 s, far past any caller's deadline, so the call's
 * budget (the gRPC deadline less a margin, or `NO_DEADLINE_BUDGET_MS` for a
 * caller that set none) is checked before each attempt and after each failed
 * one: once another attempt could not end within it, the call gives up with
 * `Unavailable`. The transaction is aborted, nothing is recorded, and the
 * caller's retry (same request id) finds the record or takes the key.
 *
 * A duplicate-key error (11000) on a history insert means another call
 * *committed* that key: it becomes `KeyTaken`, which is not a MongoError, so
 * `withTransaction` aborts the transaction (the effect written before it
 * included) and rethrows it at once; the caller answers from the winner's
 * record. Nothing is ever checked before it is inserted.
 *
 * A commit whose result is unknown (the server went away during
 * commitTransaction) is retried by the driver itself, as the transactions
 * spec requires; if the caller has given up by then, its retry replays.
 */
import { MongoError, MongoServerError, type ClientSession, type Collection, type MongoClient } from 'mongodb';
import { Unavailable, describe } from './errors.js';
import type { Kind, OperationRecord } from './records.js';

/** How long a call without a deadline may spend retrying transient conflicts. */
export const NO_DEADLINE_BUDGET_MS = 4000;
/** Left of the caller's deadline to send the answer in. */
export const DEADLINE_MARGIN_MS = 250;
/** The longest sleep `withTransaction` takes between two attempts (the driver's BACKOFF_MAX). */
const MAX_BACKOFF_MS = 500;

/** The `(request_id, kind)` key was already held by a committed record. */
export class KeyTaken extends Error {
  constructor(readonly kind: Kind) {
    super(`${kind} record already exists`);
  }
}

/** When a call started with `deadline` (ms since the epoch, or Infinity) must stop retrying. */
export function budgetEnd(deadline: number): number {
  return Number.isFinite(deadline) ? deadline - DEADLINE_MARGIN_MS : Date.now() + NO_DEADLINE_BUDGET_MS;
}

/** Runs `work` in one transaction, retried on transient errors until `until` (ms since the epoch). */
export async function transact<T>(
  client: MongoClient,
  until: number,
  work: (session: ClientSession) => Promise<T>,
): Promise<T> {
  let lastError: unknown = null;
  let attempts = 0;
  const session = client.startSession();
  try {
    return await session.withTransaction(
      async (s) => {
        if (attempts > 0 && Date.now() >= until) {
          throw new Unavailable(
            `gave up after ${attempts} attempts within the call's deadline; last: ${describe(lastError)}`,
          );
        }
        attempts += 1;
        const attemptStarted = Date.now();
        try {
          return await work(s);
        } catch (error) {
          lastError = error;
          // Give up now if another attempt (after the driver's backoff) could not end before the budget does.
          const another = Date.now() + MAX_BACKOFF_MS + (Date.now() - attemptStarted);
          if (isTransientTransactionError(error) && another >= until) {
            throw new Unavailable(
              `gave up after ${attempts} attempts within the call's deadline; last: ${describe(error)}`,
            );
          }
          throw error;
        }
      },
      { readConcern: { level: 'snapshot' }, writeConcern: { w: 'majority' } },
    );
  } finally {
    await session.endSession().catch(() => undefined);
  }
}

/** Inserts a history record in the transaction; `KeyTaken` when its key is held. */
export async function insertRecord(
  history: Collection<OperationRecord>,
  record: OperationRecord,
  session: ClientSession,
): Promise<void> {
  try {
    await history.insertOne(record, { session });
  } catch (error) {
    if (error instanceof MongoServerError && error.code === 11000) throw new KeyTaken(record.kind);
    throw error;
  }
}

function isTransientTransactionError(error: unknown): boolean {
  return error instanceof MongoError && error.hasErrorLabel('TransientTransactionError');
}

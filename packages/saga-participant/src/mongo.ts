/**
 * The MongoDB side: connecting (waited for at start-up, a stack starting
 * together), and the history collection's two indexes:
 * - the unique index on `(request_id, kind)`: the whole dedupe mechanism;
 * - the TTL index on `expire_at`: the history retention (each record
 *   carries its own expiry, `recorded_at` + the retention).
 *
 * Transactions need a replica set (a single-node one will do) or a server
 * that runs them, as SecantusDB does in this repository's tests.
 */
import { MongoClient, type Collection } from 'mongodb';
import { describe } from './errors.js';
import type { Logger } from './log.js';
import type { OperationRecord } from './records.js';

/**
 * How long an operation waits for a server before failing: short, so that a
 * call while MongoDB is down answers UNAVAILABLE well within the
 * orchestrator's call timeout (5 s by default) instead of timing out.
 */
export const SERVER_SELECTION_TIMEOUT_MS = 1000;

/** How long start-up waits for MongoDB to answer, by default. */
export const DEFAULT_STARTUP_WAIT_MS = 30_000;

export interface ConnectOptions {
  /** The client's appName (what MongoDB logs and failpoints see). */
  appName?: string;
  /** How long to keep trying before giving up (ms). */
  startupWaitMs?: number;
  serverSelectionTimeoutMS?: number;
  logger?: Logger;
}

/** A connected client, retried every 500 ms until `startupWaitMs` has passed. */
export async function connectMongo(uri: string, options: ConnectOptions = {}): Promise<MongoClient> {
  const giveUp = Date.now() + (options.startupWaitMs ?? DEFAULT_STARTUP_WAIT_MS);
  for (;;) {
    const client = new MongoClient(uri, {
      appName: options.appName ?? 'saga-participant',
      serverSelectionTimeoutMS: options.serverSelectionTimeoutMS ?? SERVER_SELECTION_TIMEOUT_MS,
    });
    try {
      await client.connect();
      await client.db('admin').command({ ping: 1 });
      return client;
    } catch (error) {
      await client.close().catch(() => undefined);
      if (Date.now() >= giveUp) throw error;
      options.logger?.('warn', 'MongoDB not ready; retrying', { error: describe(error) });
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

/** Creates the history's unique `(request_id, kind)` index and its TTL index (idempotent). */
export async function ensureHistoryIndexes(history: Collection<OperationRecord>): Promise<void> {
  await history.createIndex({ request_id: 1, kind: 1 }, { unique: true, name: 'request_id_kind' });
  await history.createIndex({ expire_at: 1 }, { expireAfterSeconds: 0, name: 'expire_at_ttl' });
}

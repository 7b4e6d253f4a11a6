/**
 * Multi-item effects with stable per-item keys: one document per order line
 * (a reservation, a parcel, a ledger entry), keyed by the call's request id
 * and the line's index, which the contract keeps stable across retries
 * ("a line's position is its stable index").
 *
 * The barrier already lets one transaction per request id commit; the
 * unique index on `(request_id, line_index)` makes the documents themselves
 * unique as well, so neither a bug that skips the barrier nor a second
 * writer (a migration, a replay tool) can ever leave two documents for one
 * line. A duplicate-key error from these inserts inside an Act means that
 * another call committed the same lines: the barrier then answers from that
 * call's record (barrier.ts).
 *
 *     await ensurePerLineIndex(db.collection('parcels'));           // in setup(db)
 *     await insertPerLine(db.collection('parcels'), call,
 *       call.order.lines.map((line) => ({ product_id: line.product_id, status: 'packed' })), session);
 */
import type { ClientSession, Collection, Document } from 'mongodb';
import type { StepCall } from './validate.js';

/** A per-line document as stored: the caller's fields plus its key. */
export type PerLine<T> = T & { request_id: string; line_index: number };

/** The unique `(request_id, line_index)` index (idempotent). */
export async function ensurePerLineIndex(collection: Collection<any>, name = 'request_id_line_index'): Promise<void> {
  await collection.createIndex({ request_id: 1, line_index: 1 }, { unique: true, name });
}

/**
 * Inserts `docs[i]` for line `i` of `call`'s order, each under the key
 * `(call.request_id, i)`, in `session`'s transaction. `docs` has one entry
 * per line (or fewer: the first lines).
 */
export async function insertPerLine<T extends Document>(
  collection: Collection<any>,
  call: Pick<StepCall, 'request_id' | 'order'>,
  docs: T[],
  session: ClientSession,
): Promise<PerLine<T>[]> {
  if (docs.length > call.order.lines.length) {
    throw new RangeError(`insertPerLine: ${docs.length} documents for ${call.order.lines.length} lines`);
  }
  const keyed = docs.map((doc, line_index) => ({ ...doc, request_id: call.request_id, line_index }));
  if (keyed.length > 0) await collection.insertMany(keyed.map((d) => ({ ...d })), { session, ordered: true });
  return keyed;
}

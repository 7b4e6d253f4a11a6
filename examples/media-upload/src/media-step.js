/**
 * A saga step whose effect is outside any database: uploading one object
 * per order line to an external media store over HTTP, and deleting them
 * to compensate. No MongoDB transaction can undo an HTTP PUT, so the step
 * follows three rules:
 *
 * 1. **Stable keys.** Line `i` of request `r` is always the object
 *    `sha256(r)[0..32]-i`: a retried, duplicated or late upload writes the
 *    same key, and the store's PUT is idempotent by key.
 * 2. **Intent before the side effect.** Before the PUT, the step writes an
 *    intent per line (`intended`: the object may exist on the store)
 *    *outside* the Act's transaction, so it survives a crash of this
 *    process between the PUT and the commit. The intents are not updated
 *    inside the Act's transaction: its snapshot predates them (a write
 *    there would match nothing, or conflict); whether the upload counts
 *    is what the barrier's `act` record says, committed with the Act.
 * 3. **Idempotent compensation that is retried until it succeeds.** The
 *    compensation DELETEs every key of the request (404 counts as gone) and
 *    then marks the intents `deleted` in its transaction; a DELETE that
 *    fails throws, which records nothing and answers UNAVAILABLE, so the
 *    orchestrator calls Compensate again. A Compensate that arrives for an
 *    Act that never committed (the crash of rule 2: a null compensation)
 *    deletes the same keys through `compensateUnapplied` — the keys follow
 *    from the request id and the line count, so nothing can be left behind.
 */
import { createHash } from 'node:crypto';
import { Unavailable, applied, undone } from '@saga/participant';

/** The object key of line `line` of request `requestId`. */
export function objectKey(requestId, line) {
  return `${createHash('sha256').update(requestId).digest('hex').slice(0, 32)}-${line}`;
}

/**
 * The step's handlers. `storeUrl`: the media store; `callTimeoutMs`: the
 * longest one HTTP request may take (also cut to the call's deadline).
 */
export function mediaStep({ storeUrl, callTimeoutMs = 2000 }) {
  const request = async (method, key, deadline, body) => {
    const timeout = Math.max(1, Math.min(callTimeoutMs, deadline - Date.now() - 300));
    let response;
    try {
      response = await fetch(`${storeUrl}/objects/${key}`, { method, body, signal: AbortSignal.timeout(timeout) });
      await response.arrayBuffer();
    } catch (error) {
      throw new Unavailable(`media store ${method} ${key}: ${error?.name === 'TimeoutError' ? 'timed out' : error?.message}`);
    }
    return response.status;
  };
  const deleteAll = async (call, deadline) => {
    for (let line = 0; line < call.order.lines.length; line += 1) {
      const status = await request('DELETE', objectKey(call.request_id, line), deadline);
      if (status !== 204 && status !== 404) throw new Unavailable(`media store DELETE answered ${status}`);
    }
  };
  const markDeleted = (db, call, session) =>
    db
      .collection('uploads')
      .updateMany({ request_id: call.request_id }, { $set: { status: 'deleted', deleted_at: new Date() } }, { session });

  return {
    async setup(db) {
      await db.collection('uploads').createIndex({ key: 1 }, { unique: true, name: 'key' });
      await db.collection('uploads').createIndex({ request_id: 1 }, { name: 'request_id' });
    },

    async act(call, _session, { db, deadline }) {
      const uploads = db.collection('uploads');
      const keys = call.order.lines.map((_, line) => objectKey(call.request_id, line));
      // Rule 2: the intents, committed on their own before any PUT (an upsert by the unique key).
      for (const [line, key] of keys.entries()) {
        await uploads.updateOne(
          { key },
          { $setOnInsert: { key, request_id: call.request_id, line_index: line, status: 'intended', created_at: new Date() } },
          { upsert: true },
        );
      }
      for (const [line, key] of keys.entries()) {
        const product = call.order.lines[line];
        const object = { request_id: call.request_id, saga_id: call.saga_id, line_index: line, ...product };
        const status = await request('PUT', key, deadline, JSON.stringify(object));
        if (status !== 201 && status !== 200) throw new Unavailable(`media store PUT answered ${status}`);
      }
      return applied(`${keys.length} objects uploaded`, { keys });
    },

    async compensate(call, session, { db, deadline }) {
      await deleteAll(call, deadline);
      await markDeleted(db, call, session);
      return undone(`${call.order.lines.length} objects deleted`);
    },

    async compensateUnapplied(call, session, { db, deadline }) {
      await deleteAll(call, deadline);
      await markDeleted(db, call, session);
    },

    listing(call) {
      return { subject: call.order.order_id || call.saga_id, amount: call.order.lines.length };
    },
  };
}

/**
 * The batch calls (ActBatch, CompensateBatch), which the example serves
 * because the package does: each call of a batch is the call on its own —
 * its own request id through the barrier, its own result in order — so a
 * batch ships each order once, refuses the unshippable one as that call's
 * own result, replays when retried, and cancels what it compensates.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Db } from 'mongodb';
import { Participant, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('batches', () => {
  let app: RunningApp;
  let participant: Participant;
  let db: Db;
  let closeDb: () => Promise<void>;

  before(async () => {
    app = await startApp({ UNSHIPPABLE_PRODUCTS: 'sku-anvil' });
    participant = new Participant(app.port);
    ({ db, close: closeDb } = await openDb(app.database));
  });

  after(async () => {
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  const statuses = async (requestId: string) =>
    (await db.collection('shipments').find({ request_id: requestId }).toArray()).map((s) => s.status);

  it('an ActBatch: one result per call in order, one shipment per request id, the refusal the call’s own; retried, all replayed', async () => {
    const shippable = Array.from({ length: 4 }, () => stepCall());
    const anvil = stepCall([{ product_id: 'sku-anvil', quantity: '1' }]);
    const calls = [...shippable, anvil, shippable[0]!];
    const results = await participant.actBatch(calls);
    assert.deepEqual(
      results.map((r) => r.request_id),
      calls.map((c) => c.request_id),
    );
    for (const result of results.slice(0, 4)) assert.equal(result.reply?.outcome, 'OUTCOME_APPLIED', JSON.stringify(result));
    assert.equal(results[4]!.reply?.outcome, 'OUTCOME_REFUSED');
    assert.equal(results[4]!.reply?.reason_code, 'UNSHIPPABLE');
    const duplicate = [results[0]!.reply!, results[5]!.reply!];
    assert.equal(duplicate.filter((r) => !r.replayed).length, 1, 'the duplicate applied once');
    assert.equal(duplicate[0]!.detail, duplicate[1]!.detail);
    for (const call of shippable) assert.deepEqual(await statuses(call.request_id), ['created']);
    assert.deepEqual(await statuses(anvil.request_id), []);

    const retried = await participant.actBatch(calls);
    assert.ok(retried.every((r) => r.reply?.replayed === true), JSON.stringify(retried));
    assert.deepEqual(
      retried.map((r) => r.reply?.detail),
      results.map((r) => r.reply?.detail),
    );
    for (const call of shippable) assert.deepEqual(await statuses(call.request_id), ['created']);
  });

  it('a CompensateBatch: the applied cancelled once, the refused nothing to undo, the never-acted a null compensation', async () => {
    const applied = stepCall();
    const anvil = stepCall([{ product_id: 'sku-anvil', quantity: '1' }]);
    const never = stepCall();
    await participant.actBatch([applied, anvil]);
    const results = await participant.compensateBatch([applied, anvil, never, applied]);
    assert.deepEqual(
      results.map((r) => r.reply?.effect),
      [
        'COMPENSATION_EFFECT_UNDONE',
        'COMPENSATION_EFFECT_NOTHING_TO_UNDO',
        'COMPENSATION_EFFECT_NULL_COMPENSATION',
        'COMPENSATION_EFFECT_UNDONE',
      ],
    );
    assert.equal([results[0]!, results[3]!].filter((r) => !r.reply!.replayed).length, 1, 'cancelled once');
    assert.deepEqual(await statuses(applied.request_id), ['cancelled']);
    const [late] = await participant.actBatch([never]);
    assert.equal(late!.reply?.reason_code, 'ALREADY_COMPENSATED');
    assert.deepEqual(await statuses(never.request_id), []);
  });
});

/**
 * ActBatch and CompensateBatch (docs/participant-protocol.md, "Batches"):
 * every call of a batch is the call on its own, deduplicated by its own
 * request id — inside one batch and across batches — with its own result
 * in order; a refusal or a malformed call is that call's result alone; a
 * batch over the size limit is refused whole before anything runs; a batch
 * retried after its reply was lost applies nothing twice.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { decodeStatus } from '../src/index.js';
import { failure, sleep, startParticipant, stepCall, type Running } from './harness.js';
import { ParcelStep } from './parcels.js';

describe('batches', () => {
  let slowMs = 0;
  const step = new ParcelStep({ afterInsert: async () => (slowMs > 0 ? sleep(slowMs) : undefined) });
  let running: Running;
  const parcels = (requestId: string) => running.db.collection('parcels').countDocuments({ request_id: requestId });

  before(async () => {
    running = await startParticipant(step, { maxBatchCalls: 8, maxInFlight: 64 });
  });
  after(async () => {
    await running?.close();
  });

  it('answers each call of an ActBatch as it would be answered alone, in order', async () => {
    const a = stepCall();
    const b = stepCall([{ product_id: 'sku-unshippable' }]);
    const c = stepCall([{}, {}]);
    const bad = { ...stepCall(), request_id: ' padded' };
    const results = await running.client.actBatch([a, a, b, null, bad, c]);
    assert.deepEqual(
      results.map((r) => r.request_id),
      [a.request_id, a.request_id, b.request_id, '', ' padded', c.request_id],
    );
    const [a1, a2, rb, missing, malformed, rc] = results;
    assert.equal(a1!.reply?.outcome, 'OUTCOME_APPLIED');
    assert.equal(a2!.reply?.outcome, 'OUTCOME_APPLIED');
    assert.equal([a1!.reply!.replayed, a2!.reply!.replayed].filter((r) => !r).length, 1, 'one of the twins applied, the other replayed');
    assert.equal(rb!.reply?.outcome, 'OUTCOME_REFUSED');
    assert.equal(rb!.reply?.reason_code, 'UNSHIPPABLE');
    assert.equal(missing!.error?.code, status.INVALID_ARGUMENT);
    assert.equal(decodeStatus(missing!.error!.details).badRequest?.[0]?.field, 'calls[3].call');
    assert.equal(malformed!.error?.code, status.INVALID_ARGUMENT);
    assert.equal(decodeStatus(malformed!.error!.details).badRequest?.[0]?.field, 'request_id');
    assert.equal(rc!.reply?.outcome, 'OUTCOME_APPLIED');
    assert.equal(await parcels(a.request_id), 1);
    assert.equal(await parcels(b.request_id), 0);
    assert.equal(await parcels(c.request_id), 2);

    const again = await running.client.actBatch([c, a, b]);
    assert.deepEqual(
      again.map((r) => [r.reply?.outcome, r.reply?.replayed]),
      [
        ['OUTCOME_APPLIED', true],
        ['OUTCOME_APPLIED', true],
        ['OUTCOME_REFUSED', true],
      ],
    );
    assert.equal(await parcels(c.request_id), 2);
  });

  it('answers each call of a CompensateBatch as alone: undone, nothing to undo, null compensation, reused id', async () => {
    const applied = stepCall();
    const refused = stepCall([{ product_id: 'sku-unshippable' }]);
    const neverActed = stepCall();
    await running.client.actBatch([applied, refused]);
    const reused = { ...applied, order: { ...applied.order, customer_id: 'bob' } };
    const results = await running.client.compensateBatch([applied, refused, neverActed, reused]);
    assert.deepEqual(
      results.slice(0, 3).map((r) => r.reply?.effect),
      ['COMPENSATION_EFFECT_UNDONE', 'COMPENSATION_EFFECT_NOTHING_TO_UNDO', 'COMPENSATION_EFFECT_NULL_COMPENSATION'],
    );
    assert.equal(results[3]!.error?.code, status.ALREADY_EXISTS);
    assert.equal(decodeStatus(results[3]!.error!.details).errorInfo?.metadata.field, 'order.customer_id');
    const late = await running.client.actBatch([neverActed]);
    assert.equal(late[0]!.reply?.reason_code, 'ALREADY_COMPENSATED');
    assert.equal(await running.db.collection('parcels').countDocuments({ request_id: applied.request_id, status: 'packed' }), 0);
  });

  it('refuses a batch over its size limit whole, naming calls, before any call runs', async () => {
    const calls = Array.from({ length: 9 }, () => stepCall());
    const f = await failure(running.client.actBatch(calls));
    assert.equal(f.code, status.INVALID_ARGUMENT);
    assert.equal(f.status?.badRequest?.[0]?.field, 'calls');
    assert.match(f.details, /9 calls in one batch, at most 8/);
    for (const call of calls) {
      assert.equal(await running.db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
    }
  });

  it('a batch retried after its reply was lost applies nothing twice', async () => {
    const calls = Array.from({ length: 6 }, () => stepCall());
    slowMs = 700;
    const lost = await failure(running.client.actBatch(calls, { deadlineMs: 300 }));
    assert.equal(lost.code, status.DEADLINE_EXCEEDED);
    slowMs = 0;
    await sleep(1500);
    const retried = await running.client.actBatch(calls);
    assert.ok(retried.every((r) => r.reply?.outcome === 'OUTCOME_APPLIED'), JSON.stringify(retried));
    for (const call of calls) assert.equal(await parcels(call.request_id), 1);
  });

  it('answers an empty batch with no results', async () => {
    assert.deepEqual(await running.client.actBatch([]), []);
  });
});

/**
 * Real concurrency through gRPC: duplicates of one call racing past each
 * other, multi-line effects keyed per line, and an Act racing its own
 * Compensate. The unique indexes decide; nothing is checked-then-inserted.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ensurePerLineIndex, insertPerLine, isDuplicateKey } from '../src/index.js';
import type { ActReply, CompensateReply } from '../src/wire.js';
import { attempt, openDb, startParticipant, stepCall, type Running } from './harness.js';
import { ParcelStep } from './parcels.js';

describe('concurrent calls', () => {
  const step = new ParcelStep();
  let running: Running;

  before(async () => {
    running = await startParticipant(step, { maxInFlight: 64 });
  });
  after(async () => {
    await running?.close();
  });

  it('50 concurrent duplicates of one Act apply it once and all answer APPLIED', async () => {
    const call = stepCall();
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => running.client.act(attempt(call, i + 1))));
    assert.ok(replies.every((r) => r.outcome === 'OUTCOME_APPLIED' && r.detail === '1 parcels'), JSON.stringify(replies));
    assert.equal(replies.filter((r) => !r.replayed).length, 1, 'exactly one answer is the first');
    assert.equal(await running.db.collection('parcels').countDocuments({ request_id: call.request_id }), 1);
    assert.equal(await running.db.collection('operation_history').countDocuments({ request_id: call.request_id }), 1);
  });

  it('50 concurrent duplicates of a 4-line Act leave exactly one document per (request, line index)', async () => {
    const call = stepCall([{}, { product_id: 'sku-pear' }, { product_id: 'sku-fig', quantity: '7' }, {}]);
    const replies = await Promise.all(Array.from({ length: 50 }, () => running.client.act(call)));
    assert.ok(replies.every((r) => r.outcome === 'OUTCOME_APPLIED'));
    const docs = await running.db
      .collection('parcels')
      .find({ request_id: call.request_id })
      .sort({ line_index: 1 })
      .toArray();
    assert.deepEqual(
      docs.map((d) => [d.line_index, d.product_id, d.quantity]),
      [
        [0, 'sku-apple', '2'],
        [1, 'sku-pear', '2'],
        [2, 'sku-fig', '7'],
        [3, 'sku-apple', '2'],
      ],
    );
  });

  it('the per-line unique index holds even for a writer that skips the barrier', async () => {
    const { db, client, close } = await openDb(running.db.databaseName);
    try {
      const parcels = db.collection('parcels');
      await ensurePerLineIndex(parcels);
      const call = stepCall([{}, {}]);
      const session = client.startSession();
      try {
        await insertPerLine(parcels, call, [{ n: 1 }, { n: 2 }], session);
        await assert.rejects(insertPerLine(parcels, call, [{ n: 1 }], session), (e) => isDuplicateKey(e));
        await assert.rejects(insertPerLine(parcels, call, [{}, {}, {}], session), RangeError);
      } finally {
        await session.endSession();
      }
      assert.equal(await parcels.countDocuments({ request_id: call.request_id }), 2);
    } finally {
      await close();
    }
  });

  it('an Act racing its own Compensate never leaves an effect behind the compensation', async () => {
    const calls = Array.from({ length: 20 }, () => stepCall());
    const outcomes = await Promise.all(
      calls.map(async (call, i) => {
        const [act, compensation] =
          i % 2 === 0
            ? await Promise.all([running.client.act(call), running.client.compensate(call)])
            : (await Promise.all([running.client.compensate(call), running.client.act(call)])).reverse();
        return { call, act: act as ActReply, compensation: compensation as CompensateReply };
      }),
    );
    for (const { call, act, compensation } of outcomes) {
      const packed = await running.db.collection('parcels').countDocuments({ request_id: call.request_id, status: 'packed' });
      assert.equal(packed, 0, `request ${call.request_id}: ${JSON.stringify({ act, compensation })}`);
      if (compensation.effect === 'COMPENSATION_EFFECT_UNDONE') {
        assert.equal(act.outcome, 'OUTCOME_APPLIED');
      } else {
        assert.equal(compensation.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
        assert.equal(act.outcome, 'OUTCOME_REFUSED');
        assert.equal(act.reason_code, 'ALREADY_COMPENSATED');
        assert.equal(await running.db.collection('parcels').countDocuments({ request_id: call.request_id }), 0);
      }
    }
  });
});

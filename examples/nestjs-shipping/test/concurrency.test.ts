/**
 * Concurrent duplicates: 50 copies of one call at once. The unique key lets
 * exactly one transaction win; the others roll back (their shipment
 * included) and answer from its record. Counted in the `shipments`
 * collection itself, which has no unique index of its own to hide a broken
 * barrier.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Db } from 'mongodb';
import { Participant, attempt, openDb, startApp, stepCall, type RunningApp } from './harness.js';

const COPIES = 50;

describe('50 concurrent duplicates', () => {
  let app: RunningApp;
  let participant: Participant;
  let db: Db;
  let closeDb: () => Promise<void>;

  before(async () => {
    app = await startApp();
    participant = new Participant(app.port);
    ({ db, close: closeDb } = await openDb(app.database));
  });

  after(async () => {
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  it(`${COPIES} concurrent duplicate Acts: exactly one shipment and exactly one reply not replayed`, async () => {
    const call = stepCall();
    const replies = await Promise.all(
      Array.from({ length: COPIES }, (_, i) => participant.act(attempt(call, i + 1), { deadlineMs: 30_000 })),
    );
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 1);
    assert.equal(replies.filter((r) => !r.replayed).length, 1);
    assert.ok(replies.every((r) => r.outcome === 'OUTCOME_APPLIED' && r.detail === replies[0]!.detail));
    assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }), 1);
  });

  it(`${COPIES} concurrent duplicate Compensates of an applied Act: cancelled once, one reply not replayed`, async () => {
    const call = stepCall();
    await participant.act(call);
    const replies = await Promise.all(
      Array.from({ length: COPIES }, (_, i) => participant.compensate(attempt(call, i + 1), { deadlineMs: 30_000 })),
    );
    assert.ok(replies.every((r) => r.effect === 'COMPENSATION_EFFECT_UNDONE'));
    assert.equal(replies.filter((r) => !r.replayed).length, 1);
    const shipments = await db.collection('shipments').find({ request_id: call.request_id }).toArray();
    assert.deepEqual(shipments.map((s) => s.status), ['cancelled']);
    assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }), 2);
  });

  it(`${COPIES} concurrent duplicate Compensates before any Act: one null compensation, the Act then refused`, async () => {
    const call = stepCall();
    const replies = await Promise.all(
      Array.from({ length: COPIES }, (_, i) => participant.compensate(attempt(call, i + 1), { deadlineMs: 30_000 })),
    );
    assert.ok(replies.every((r) => r.effect === 'COMPENSATION_EFFECT_NULL_COMPENSATION'));
    assert.equal(replies.filter((r) => !r.replayed).length, 1);
    assert.equal((await participant.act(call)).reason_code, 'ALREADY_COMPENSATED');
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 0);
  });
});

/**
 * Orders it cannot ship: a line whose product is marked unshippable
 * (`shipping_rules`, seeded from UNSHIPPABLE_PRODUCTS) gets OUTCOME_REFUSED
 * with reason code UNSHIPPABLE, recorded, and nothing is shipped.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Db } from 'mongodb';
import { Participant, attempt, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('refusing what cannot be shipped', () => {
  let app: RunningApp;
  let participant: Participant;
  let db: Db;
  let closeDb: () => Promise<void>;

  before(async () => {
    app = await startApp({ UNSHIPPABLE_PRODUCTS: 'sku-anvil, sku-piano' });
    participant = new Participant(app.port);
    ({ db, close: closeDb } = await openDb(app.database));
  });

  after(async () => {
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  it('seeds shipping_rules from UNSHIPPABLE_PRODUCTS at start-up', async () => {
    const rules = await db.collection('shipping_rules').find().sort({ _id: 1 }).toArray();
    assert.deepEqual(rules, [
      { _id: 'sku-anvil', unshippable: true },
      { _id: 'sku-piano', unshippable: true },
    ] as unknown[]);
  });

  it('an unshippable line: REFUSED UNSHIPPABLE naming the product, recorded, replayed, nothing shipped', async () => {
    const call = stepCall([{ product_id: 'sku-apple' }, { product_id: 'sku-piano', quantity: '1' }]);
    const reply = await participant.act(call);
    assert.equal(reply.outcome, 'OUTCOME_REFUSED');
    assert.equal(reply.reason_code, 'UNSHIPPABLE');
    assert.equal(reply.replayed, false);
    assert.match(reply.detail, /sku-piano/);
    assert.deepEqual(await participant.act(attempt(call, 2)), { ...reply, replayed: true });
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 0);
    const { operations } = await participant.listOperations(call.request_id);
    assert.deepEqual(
      operations.map((op) => [op.kind, op.status, op.detail]),
      [['act', 'refused', `UNSHIPPABLE: ${reply.detail}`]],
    );
  });

  it('Compensate after a refused Act: NOTHING_TO_UNDO, recorded once', async () => {
    const call = stepCall([{ product_id: 'sku-anvil' }]);
    await participant.act(call);
    const reply = await participant.compensate(call);
    assert.equal(reply.effect, 'COMPENSATION_EFFECT_NOTHING_TO_UNDO');
    assert.equal(reply.replayed, false);
    assert.deepEqual(await participant.compensate(attempt(call, 2)), { ...reply, replayed: true });
    const { operations } = await participant.listOperations(call.request_id);
    assert.deepEqual(
      operations.map((op) => `${op.kind}:${op.status}`),
      ['act:refused', 'compensate:nothing_to_undo'],
    );
  });

  it('a rule added while running applies to the next order', async () => {
    await db.collection<{ _id: string; unshippable: boolean }>('shipping_rules').insertOne({ _id: 'sku-pear', unshippable: true });
    const reply = await participant.act(stepCall([{ product_id: 'sku-pear' }]));
    assert.equal(reply.reason_code, 'UNSHIPPABLE');
    const shippable = await participant.act(stepCall([{ product_id: 'sku-apple' }]));
    assert.equal(shippable.outcome, 'OUTCOME_APPLIED');
  });
});

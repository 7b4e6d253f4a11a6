/**
 * The shipping step through the barrier, driven through real gRPC against
 * the running app and a real MongoDB: each row of the protocol's barrier
 * table, checked by what it does to the `shipments` collection — one
 * shipment per applied Act, cancelled once by its Compensate, never created
 * after one — and by what ListOperations shows. The barrier's own rules are
 * the package's tests; these prove the step is wired into it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { Db } from 'mongodb';
import { Participant, attempt, failure, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('the shipping step, row by row', () => {
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
    assert.equal(await app?.stop(), 0, 'SIGTERM stops the app cleanly (exit 0)');
  });

  const shipments = (requestId: string) => db.collection('shipments').find({ request_id: requestId }).toArray();
  const records = async (requestId: string) =>
    (await participant.listOperations(requestId)).operations.map((op) => `${op.kind}:${op.status}`);

  it('first Act: one shipment for the order, and an act applied record naming it', async () => {
    const call = stepCall([{ quantity: '2' }, { product_id: 'sku-pear', quantity: '3' }]);
    const reply = await participant.act(call);
    assert.equal(reply.outcome, 'OUTCOME_APPLIED');
    assert.equal(reply.replayed, false);
    assert.match(reply.detail, /^shipment shp-/);
    const [shipment, ...more] = await shipments(call.request_id);
    assert.equal(more.length, 0);
    assert.equal(`shipment ${shipment!._id}`, reply.detail);
    assert.equal(shipment!.status, 'created');
    assert.equal(shipment!.saga_id, call.saga_id);
    assert.equal(shipment!.order_id, call.order.order_id);
    assert.equal(shipment!.customer_id, 'alice');
    assert.deepEqual(shipment!.lines, [
      { product_id: 'sku-apple', quantity: '2' },
      { product_id: 'sku-pear', quantity: '3' },
    ]);
    const { operations } = await participant.listOperations(call.request_id);
    assert.deepEqual(
      operations.map((op) => [op.kind, op.status, op.detail, op.subject, op.amount]),
      [['act', 'applied', reply.detail, call.order.order_id, '5']],
      'ListOperations shows the order and the units shipped',
    );
  });

  it('Act repeated (another attempt): the recorded answer, replayed, no second shipment', async () => {
    const call = stepCall();
    const first = await participant.act(call);
    const again = await participant.act(attempt(call, 2));
    assert.deepEqual(again, { ...first, replayed: true });
    assert.equal((await shipments(call.request_id)).length, 1);
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('a known request id with other parameters: ALREADY_EXISTS, REQUEST_ID_REUSED naming the field; nothing shipped or cancelled', async () => {
    const call = stepCall();
    const first = await participant.act(call);
    const changes: [string, typeof call][] = [
      ['order.lines[0].quantity', { ...call, order: { ...call.order, lines: [{ ...call.order.lines[0]!, quantity: '3' }] } }],
      ['saga_id', { ...call, saga_id: '00000000-0000-7000-8000-000000000000' }],
    ];
    for (const [field, changed] of changes) {
      const { code, details, errorInfo } = await failure(participant.act(changed));
      assert.equal(code, status.ALREADY_EXISTS, field);
      assert.ok(details.includes(field), `${details} names ${field}`);
      assert.equal(errorInfo?.reason, 'REQUEST_ID_REUSED');
      assert.equal(errorInfo?.metadata.field, field);
    }
    const compensation = await failure(participant.compensate({ ...call, order: { ...call.order, total_cents: '1' } }));
    assert.equal(compensation.code, status.ALREADY_EXISTS);
    assert.equal(compensation.errorInfo?.metadata.field, 'order.total_cents');
    assert.deepEqual(await participant.act(attempt(call, 3)), { ...first, replayed: true });
    assert.deepEqual((await shipments(call.request_id)).map((s) => s.status), ['created']);
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('Compensate after an applied Act: cancels the shipment once; repeats replay UNDONE', async () => {
    const call = stepCall();
    const act = await participant.act(call);
    const reply = await participant.compensate(call);
    assert.equal(reply.effect, 'COMPENSATION_EFFECT_UNDONE');
    assert.equal(reply.replayed, false);
    assert.equal(reply.detail, `${act.detail} cancelled`);
    const [cancelled] = await shipments(call.request_id);
    assert.equal(cancelled!.status, 'cancelled');
    assert.deepEqual(await participant.compensate(attempt(call, 2)), { ...reply, replayed: true });
    const [still] = await shipments(call.request_id);
    assert.deepEqual(still!.cancelled_at, cancelled!.cancelled_at, 'cancelled once');
    assert.deepEqual(await records(call.request_id), ['act:applied', 'compensate:undone']);
    const late = await participant.act(attempt(call, 3));
    assert.equal(late.outcome, 'OUTCOME_REFUSED', 'the Act repeated after the cancellation does not ship again');
    assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    assert.deepEqual((await shipments(call.request_id)).map((s) => s.status), ['cancelled']);
  });

  it('Compensate before its Act: NULL_COMPENSATION; the late Act is refused ALREADY_COMPENSATED and never ships', async () => {
    const call = stepCall();
    const reply = await participant.compensate(call);
    assert.equal(reply.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
    for (const n of [1, 2]) {
      const late = await participant.act(attempt(call, n));
      assert.equal(late.outcome, 'OUTCOME_REFUSED');
      assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    }
    assert.equal((await shipments(call.request_id)).length, 0);
    assert.deepEqual((await records(call.request_id)).sort(), ['act:blocked', 'compensate:null_compensation']);
  });

  it('Act racing its own Compensate: applied then cancelled, or never shipped; never a created shipment left', async () => {
    const calls = Array.from({ length: 20 }, () => stepCall());
    const results = await Promise.all(
      calls.map(async (call) => {
        const [act, compensation] = await Promise.all([participant.act(call), participant.compensate(call)]);
        return { call, act, compensation };
      }),
    );
    for (const { call, act, compensation } of results) {
      const written = await shipments(call.request_id);
      if (compensation.effect === 'COMPENSATION_EFFECT_UNDONE') {
        assert.equal(act.outcome, 'OUTCOME_APPLIED');
        assert.deepEqual(written.map((s) => s.status), ['cancelled']);
      } else {
        assert.equal(compensation.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
        assert.equal(act.reason_code, 'ALREADY_COMPENSATED');
        assert.equal(written.length, 0);
      }
    }
  });

  it('a malformed call: INVALID_ARGUMENT naming the field, nothing recorded or shipped', async () => {
    const call = stepCall();
    const cases: [string, typeof call | Omit<typeof call, 'order'> & { order: null }][] = [
      ['request_id', { ...call, request_id: 'x'.repeat(129) }],
      ['order', { ...call, order: null }],
      ['order.lines[0].quantity', { ...call, order: { ...call.order, lines: [{ ...call.order.lines[0]!, quantity: '0' }] } }],
    ];
    for (const [field, bad] of cases) {
      for (const send of [participant.act.bind(participant), participant.compensate.bind(participant)]) {
        const { code, details } = await failure(send(bad));
        assert.equal(code, status.INVALID_ARGUMENT, field);
        assert.ok(details.startsWith(`${field}:`), `${details} names ${field}`);
      }
    }
    assert.deepEqual(await records(call.request_id), []);
    assert.equal((await shipments(call.request_id)).length, 0);
  });

  it('logs one JSON line per call with the service, request_id, saga_id, step, attempt and outcome', async () => {
    const call = attempt(stepCall(), 4);
    await participant.act(call);
    const line = app
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((entry) => entry.request_id === call.request_id);
    assert.ok(line, 'a log line for the call');
    assert.equal(line.service, 'nestjs-shipping');
    assert.equal(line.saga_id, call.saga_id);
    assert.equal(line.step, 'shipping');
    assert.equal(line.attempt, 4);
    assert.equal(line.outcome, 'OUTCOME_APPLIED');
  });
});

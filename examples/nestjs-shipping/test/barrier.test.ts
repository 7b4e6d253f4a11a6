/**
 * The barrier table of docs/participant-protocol.md, one test per row, driven
 * through real gRPC against the running app and a real MongoDB; each checks
 * the answer, the shipments written and the operationHistory recorded.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { Db } from 'mongodb';
import { Participant, attempt, failure, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('the barrier, row by row', () => {
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

  it('first Act: ships the order and records act applied, in one transaction', async () => {
    const call = stepCall();
    const reply = await participant.act(call);
    assert.equal(reply.outcome, 'OUTCOME_APPLIED');
    assert.equal(reply.replayed, false);
    assert.match(reply.detail, /^shipment shp-/);
    const written = await shipments(call.request_id);
    assert.equal(written.length, 1);
    assert.equal(written[0]!.status, 'created');
    assert.equal(`shipment ${written[0]!._id}`, reply.detail);
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('Act repeated with the same parameters (another attempt): the recorded answer, replayed, no second shipment', async () => {
    const call = stepCall();
    const first = await participant.act(call);
    const again = await participant.act(attempt(call, 2));
    assert.deepEqual(again, { ...first, replayed: true });
    assert.equal((await shipments(call.request_id)).length, 1);
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('Act with a known request id but other parameters: ALREADY_EXISTS naming the field; nothing changes', async () => {
    const call = stepCall();
    const first = await participant.act(call);
    const changes: [string, typeof call][] = [
      ['order.lines[0].quantity', { ...call, order: { ...call.order!, lines: [{ ...call.order!.lines[0]!, quantity: '3' }] } }],
      ['saga_id', { ...call, saga_id: '00000000-0000-7000-8000-000000000000' }],
      ['step', { ...call, step: 'shipping-2' }],
      ['order.customer_id', { ...call, order: { ...call.order!, customer_id: 'bob' } }],
    ];
    for (const [field, changed] of changes) {
      const { code, details } = await failure(participant.act(changed));
      assert.equal(code, status.ALREADY_EXISTS, field);
      assert.ok(details.includes(field), `${details} names ${field}`);
    }
    assert.deepEqual(await participant.act(attempt(call, 3)), { ...first, replayed: true });
    assert.equal((await shipments(call.request_id)).length, 1);
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('Compensate after an applied Act: cancels the shipment once and records compensate undone', async () => {
    const call = stepCall();
    await participant.act(call);
    const reply = await participant.compensate(call);
    assert.equal(reply.effect, 'COMPENSATION_EFFECT_UNDONE');
    assert.equal(reply.replayed, false);
    const [shipment] = await shipments(call.request_id);
    assert.equal(shipment!.status, 'cancelled');
    assert.deepEqual(await records(call.request_id), ['act:applied', 'compensate:undone']);
  });

  it('Compensate repeated: the recorded UNDONE, replayed; never undoes twice', async () => {
    const call = stepCall();
    await participant.act(call);
    const first = await participant.compensate(call);
    const [cancelled] = await shipments(call.request_id);
    const again = await participant.compensate(attempt(call, 2));
    assert.deepEqual(again, { ...first, replayed: true });
    const [still] = await shipments(call.request_id);
    assert.deepEqual(still!.cancelled_at, cancelled!.cancelled_at, 'the shipment was cancelled once');
    assert.deepEqual(await records(call.request_id), ['act:applied', 'compensate:undone']);
  });

  it('Compensate with other parameters than its Act: ALREADY_EXISTS naming the field; nothing undone', async () => {
    const call = stepCall();
    await participant.act(call);
    const { code, details } = await failure(
      participant.compensate({ ...call, order: { ...call.order!, total_cents: '1' } }),
    );
    assert.equal(code, status.ALREADY_EXISTS);
    assert.ok(details.includes('order.total_cents'), details);
    assert.equal((await shipments(call.request_id))[0]!.status, 'created');
    assert.deepEqual(await records(call.request_id), ['act:applied']);
  });

  it('Compensate before its Act ever arrived: NULL_COMPENSATION, with a blocked act record in the same transaction', async () => {
    const call = stepCall();
    const reply = await participant.compensate(call);
    assert.equal(reply.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
    assert.equal(reply.replayed, false);
    assert.deepEqual((await records(call.request_id)).sort(), ['act:blocked', 'compensate:null_compensation']);
    const again = await participant.compensate(attempt(call, 2));
    assert.deepEqual(again, { ...reply, replayed: true });
    assert.equal((await shipments(call.request_id)).length, 0);
  });

  it('Act arriving after its Compensate: REFUSED ALREADY_COMPENSATED, never applied', async () => {
    const call = stepCall();
    await participant.compensate(call);
    for (const n of [1, 2]) {
      const late = await participant.act(attempt(call, n));
      assert.equal(late.outcome, 'OUTCOME_REFUSED');
      assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    }
    assert.equal((await shipments(call.request_id)).length, 0);
    assert.deepEqual((await records(call.request_id)).sort(), ['act:blocked', 'compensate:null_compensation']);
  });

  it('Act repeated after its shipment was cancelled: REFUSED ALREADY_COMPENSATED, not shipped again', async () => {
    const call = stepCall();
    await participant.act(call);
    await participant.compensate(call);
    const late = await participant.act(attempt(call, 2));
    assert.equal(late.outcome, 'OUTCOME_REFUSED');
    assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    const written = await shipments(call.request_id);
    assert.deepEqual(written.map((s) => s.status), ['cancelled']);
  });

  it('Act racing its own Compensate: either applied then undone, or null compensation then refused; never a shipment left', async () => {
    const calls = Array.from({ length: 20 }, () => stepCall());
    const results = await Promise.all(
      calls.map(async (call) => {
        const [act, compensation] = await Promise.all([participant.act(call), participant.compensate(call)]);
        return { call, act, compensation };
      }),
    );
    for (const { call, act, compensation } of results) {
      if (compensation.effect === 'COMPENSATION_EFFECT_UNDONE') {
        assert.equal(act.outcome, 'OUTCOME_APPLIED');
      } else {
        assert.equal(compensation.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
        assert.equal(act.reason_code, 'ALREADY_COMPENSATED');
      }
      const written = await shipments(call.request_id);
      assert.ok(written.every((s) => s.status === 'cancelled'), `no created shipment left for ${call.request_id}`);
      assert.ok(written.length <= 1);
    }
  });

  it('a malformed call: INVALID_ARGUMENT naming the field, nothing recorded', async () => {
    const call = stepCall();
    const cases: [string, typeof call][] = [
      ['request_id', { ...call, request_id: '' }],
      ['request_id', { ...call, request_id: 'x'.repeat(129) }],
      ['saga_id', { ...call, saga_id: '' }],
      ['order', { ...call, order: null }],
      ['order.lines', { ...call, order: { ...call.order!, lines: [] } }],
      ['order.lines[0].quantity', { ...call, order: { ...call.order!, lines: [{ ...call.order!.lines[0]!, quantity: '0' }] } }],
      ['order.lines[0].product_id', { ...call, order: { ...call.order!, lines: [{ ...call.order!.lines[0]!, product_id: '' }] } }],
    ];
    for (const [field, bad] of cases) {
      for (const send of [participant.act.bind(participant), participant.compensate.bind(participant)]) {
        const { code, details } = await failure(send(bad));
        assert.equal(code, status.INVALID_ARGUMENT, field);
        assert.ok(details.startsWith(`${field}:`), `${details} names ${field}`);
      }
    }
    assert.deepEqual(await records(call.request_id), []);
    const { code } = await failure(participant.listOperations(''));
    assert.equal(code, status.INVALID_ARGUMENT);
  });

  it('logs one JSON line per call with request_id, saga_id, step and attempt', async () => {
    const call = attempt(stepCall(), 4);
    await participant.act(call);
    const line = app
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((entry) => entry.request_id === call.request_id);
    assert.ok(line, 'a log line for the call');
    assert.equal(line.saga_id, call.saga_id);
    assert.equal(line.step, 'shipping');
    assert.equal(line.attempt, 4);
    assert.equal(line.outcome, 'OUTCOME_APPLIED');
  });
});

/**
 * Every row of the barrier's table (docs/participant-protocol.md), through
 * gRPC against a participant started from plain Node, with what each row
 * leaves in MongoDB: the history records and the step's own parcels.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { StepError } from '../src/index.js';
import { attempt, failure, startParticipant, stepCall, type Running } from './harness.js';
import { ParcelStep } from './parcels.js';

describe('the barrier', () => {
  const step = new ParcelStep({
    afterInsert: async (call) => {
      if (call.order.customer_id === 'crash') throw new Error('the handler crashed after its writes');
      if (call.order.customer_id === 'closed') {
        throw new StepError(status.FAILED_PRECONDITION, 'account closed', { domain: 'ship.v1', reason: 'ACCOUNT_CLOSED' });
      }
    },
  });
  let running: Running;
  const parcels = (requestId: string, status?: string) =>
    running.db.collection('parcels').countDocuments(status ? { request_id: requestId, status } : { request_id: requestId });
  const records = (requestId: string) =>
    running.db.collection('operation_history').find({ request_id: requestId }).sort({ kind: 1 }).toArray();

  before(async () => {
    running = await startParticipant(step);
  });
  after(async () => {
    await running?.close();
  });

  it('applies a first Act once and replays it to every repeat', async () => {
    const call = stepCall([{}, { product_id: 'sku-pear' }]);
    const first = await running.client.act(call);
    assert.deepEqual(first, { outcome: 'OUTCOME_APPLIED', reason_code: '', detail: '2 parcels', replayed: false });
    const again = await running.client.act(attempt(call, 2));
    assert.deepEqual(again, { ...first, replayed: true });
    assert.equal(await parcels(call.request_id), 2);
    const rows = await records(call.request_id);
    assert.deepEqual(
      rows.map((r) => [r.kind, r.status]),
      [['act', 'applied']],
    );
    const listed = await running.client.listOperations(call.request_id);
    assert.equal(listed.operations.length, 1);
    assert.equal(listed.operations[0]!.status, 'applied');
    assert.equal(listed.operations[0]!.subject, 'alice');
    assert.equal(listed.operations[0]!.amount, call.order.total_cents);
  });

  it('refuses a request id reused with other parameters, naming the field, and changes nothing', async () => {
    const call = stepCall();
    await running.client.act(call);
    const other = { ...call, order: { ...call.order, lines: [{ ...call.order.lines[0]!, quantity: '3' }], total_cents: '450' } };
    const reused = await failure(running.client.act(other));
    assert.equal(reused.code, status.ALREADY_EXISTS);
    assert.equal(reused.status?.errorInfo?.reason, 'REQUEST_ID_REUSED');
    assert.equal(reused.status?.errorInfo?.metadata.field, 'order.lines[0].quantity');
    assert.match(reused.details, /order\.lines\[0\]\.quantity: "2" recorded, "3" received/);
    const compensation = await failure(running.client.compensate(other));
    assert.equal(compensation.code, status.ALREADY_EXISTS);
    assert.equal(await parcels(call.request_id, 'packed'), 1);
    assert.equal((await records(call.request_id)).length, 1);
  });

  it('undoes an applied Act once, replays the undo, and refuses the Act after it', async () => {
    const call = stepCall();
    await running.client.act(call);
    const undone = await running.client.compensate(call);
    assert.deepEqual(undone, { effect: 'COMPENSATION_EFFECT_UNDONE', detail: '1 of 1 parcels returned', replayed: false });
    assert.deepEqual(await running.client.compensate(attempt(call, 2)), { ...undone, replayed: true });
    const late = await running.client.act(attempt(call, 3));
    assert.equal(late.outcome, 'OUTCOME_REFUSED');
    assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    assert.equal(await parcels(call.request_id, 'returned'), 1);
    assert.equal(await parcels(call.request_id, 'packed'), 0);
    assert.deepEqual(
      (await records(call.request_id)).map((r) => [r.kind, r.status]),
      [
        ['act', 'applied'],
        ['compensate', 'undone'],
      ],
    );
  });

  it('records a refusal alone (the handler’s writes dropped), replays it, and has nothing to undo', async () => {
    const call = stepCall([{}, { product_id: 'sku-unshippable' }]);
    const first = await running.client.act(call);
    assert.equal(first.outcome, 'OUTCOME_REFUSED');
    assert.equal(first.reason_code, 'UNSHIPPABLE');
    assert.equal(first.detail, 'line 1 cannot be shipped');
    assert.equal(await parcels(call.request_id), 0, 'the parcels the refusing handler inserted were rolled back');
    assert.deepEqual(await running.client.act(attempt(call, 2)), { ...first, replayed: true });
    const compensation = await running.client.compensate(call);
    assert.equal(compensation.effect, 'COMPENSATION_EFFECT_NOTHING_TO_UNDO');
    assert.deepEqual(
      (await records(call.request_id)).map((r) => [r.kind, r.status, r.reason_code]),
      [
        ['act', 'refused', 'UNSHIPPABLE'],
        ['compensate', 'nothing_to_undo', ''],
      ],
    );
  });

  it('answers a Compensate before its Act with a null compensation, runs compensateUnapplied, and blocks the Act', async () => {
    const call = stepCall();
    const actsBefore = step.counts.act;
    const unappliedBefore = step.counts.unapplied;
    const first = await running.client.compensate(call);
    assert.equal(first.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
    assert.equal(first.replayed, false);
    assert.equal((await running.client.compensate(attempt(call, 2))).replayed, true);
    const late = await running.client.act(call);
    assert.equal(late.outcome, 'OUTCOME_REFUSED');
    assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
    assert.equal(step.counts.act, actsBefore, 'the late Act never reached the handler');
    assert.equal(step.counts.unapplied, unappliedBefore + 1, 'compensateUnapplied ran once');
    assert.equal(await running.db.collection('unapplied').countDocuments({ request_id: call.request_id }), 1);
    assert.equal(await parcels(call.request_id), 0);
    assert.deepEqual(
      (await records(call.request_id)).map((r) => [r.kind, r.status]),
      [
        ['act', 'blocked'],
        ['compensate', 'null_compensation'],
      ],
    );
  });

  it('leaves nothing behind when the handler throws after its writes; the retry applies once', async () => {
    const call = stepCall();
    call.order.customer_id = 'crash';
    const crashed = await failure(running.client.act(call));
    assert.equal(crashed.code, status.INTERNAL);
    assert.match(crashed.details, /the handler crashed/);
    assert.equal(await parcels(call.request_id), 0);
    assert.equal((await records(call.request_id)).length, 0);
    const closed = stepCall();
    closed.order.customer_id = 'closed';
    const refusedByCode = await failure(running.client.act(closed));
    assert.equal(refusedByCode.code, status.FAILED_PRECONDITION);
    assert.equal(refusedByCode.status?.errorInfo?.reason, 'ACCOUNT_CLOSED');
    assert.equal((await records(closed.request_id)).length, 0);
    const fixed = { ...call, order: { ...call.order, customer_id: 'alice' } };
    const retry = { ...fixed, request_id: `${call.request_id}-2` };
    assert.equal((await running.client.act(retry)).outcome, 'OUTCOME_APPLIED');
    assert.equal(await parcels(retry.request_id), 1);
  });

  for (const [field, mutate, problem] of [
    ['request_id', (c: ReturnType<typeof stepCall>) => (c.request_id = ''), /must not be empty/],
    ['request_id', (c: ReturnType<typeof stepCall>) => (c.request_id = 'x'.repeat(129)), /at most 128 bytes/],
    ['saga_id', (c: ReturnType<typeof stepCall>) => (c.saga_id = 'a\u0001b'), /control characters/],
    ['step', (c: ReturnType<typeof stepCall>) => (c.step = ''), /must not be empty/],
    ['order.lines', (c: ReturnType<typeof stepCall>) => (c.order.lines = []), /must not be empty/],
    ['order.lines[0].quantity', (c: ReturnType<typeof stepCall>) => (c.order.lines[0]!.quantity = '0'), /must be positive/],
    ['order.lines[0].product_id', (c: ReturnType<typeof stepCall>) => (c.order.lines[0]!.product_id = ''), /must not be empty/],
    ['order.customer_id', (c: ReturnType<typeof stepCall>) => (c.order.customer_id = '\u200b'), /invisible format characters \(U\+200B at byte 0\)/],
    ['order.lines[0].product_id', (c: ReturnType<typeof stepCall>) => (c.order.lines[0]!.product_id = ' sku'), /must not start with whitespace/],
    ['order.order_id', (c: ReturnType<typeof stepCall>) => (c.order.order_id = 'o-1\u00a0'), /must not end with whitespace \(U\+00A0\)/],
    ['step', (c: ReturnType<typeof stepCall>) => (c.step = '\u3000 '), /must not be only whitespace/],
    ['saga_id', (c: ReturnType<typeof stepCall>) => (c.saga_id = 'é\u0085'), /control characters \(U\+0085 at byte 2\)/],
  ] as const) {
    it(`refuses a call whose ${field} is malformed with INVALID_ARGUMENT naming it, and stores nothing`, async () => {
      const call = stepCall();
      mutate(call);
      for (const rpc of ['act', 'compensate'] as const) {
        const refused = await failure(running.client[rpc](call));
        assert.equal(refused.code, status.INVALID_ARGUMENT);
        assert.ok(refused.details.startsWith(`${field}:`), refused.details);
        assert.match(refused.details, problem);
        assert.equal(refused.status?.badRequest?.[0]?.field, field);
      }
      assert.equal(await running.db.collection('operation_history').countDocuments({ saga_id: call.saga_id }), 0);
      assert.equal(await running.db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
    });
  }

  it('refuses an order sent without one with INVALID_ARGUMENT naming order', async () => {
    const call = { ...stepCall(), order: null };
    const refused = await failure(running.client.act(call));
    assert.equal(refused.code, status.INVALID_ARGUMENT);
    assert.equal(refused.status?.badRequest?.[0]?.field, 'order');
  });
});

/**
 * Transient MongoDB errors (through the server's `failCommand` failpoint,
 * for this participant's appName only), deadlines and admission: what
 * clears within the call's deadline is retried and applied once; what does
 * not is UNAVAILABLE before the deadline with nothing recorded.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { attempt, failCommand, failCommandOff, failure, openDb, sleep, startParticipant, stepCall, type Running } from './harness.js';
import { ParcelStep } from './parcels.js';

const APP = 'participant-transient-test';

describe('transient errors and deadlines', () => {
  let slowMs = 0;
  const step = new ParcelStep({ afterInsert: async () => (slowMs > 0 ? sleep(slowMs) : undefined) });
  let running: Running;
  let admin: Awaited<ReturnType<typeof openDb>>;
  let supported = true;

  before(async () => {
    running = await startParticipant(step, { serviceName: APP, maxInFlight: 2 });
    admin = await openDb(running.db.databaseName);
    supported = await failCommand(admin.db, 'off', {});
  });
  afterEach(async () => {
    slowMs = 0;
    await failCommandOff(admin.db);
  });
  after(async () => {
    await failCommandOff(admin.db);
    await admin?.close();
    await running?.close();
  });

  const count = (collection: string, requestId: string) =>
    running.db.collection(collection).countDocuments({ request_id: requestId });

  it('retries a TransientTransactionError that clears and applies once', async (t) => {
    if (!supported) return t.skip('the MongoDB under test has no failCommand (start it with test commands)');
    const stepActs = step.counts.act;
    await failCommand(admin.db, { times: 3 }, {
      failCommands: ['insert'],
      errorCode: 112,
      errorLabels: ['TransientTransactionError'],
      appName: APP,
    });
    const call = stepCall();
    const reply = await running.client.act(call, { deadlineMs: 10_000 });
    assert.equal(reply.outcome, 'OUTCOME_APPLIED');
    assert.equal(reply.replayed, false);
    assert.equal(await count('operation_history', call.request_id), 1);
    assert.equal(await count('parcels', call.request_id), 1);
    assert.ok(step.counts.act - stepActs >= 1);
  });

  it('retries the commit on UnknownTransactionCommitResult and applies once', async (t) => {
    if (!supported) return t.skip('no failCommand');
    await failCommand(admin.db, { times: 2 }, {
      failCommands: ['commitTransaction'],
      errorCode: 91,
      errorLabels: ['UnknownTransactionCommitResult'],
      appName: APP,
    });
    const call = stepCall();
    const reply = await running.client.act(call, { deadlineMs: 10_000 });
    assert.equal(reply.outcome, 'OUTCOME_APPLIED');
    assert.equal(await count('operation_history', call.request_id), 1);
    assert.equal(await count('parcels', call.request_id), 1);
  });

  it('answers UNAVAILABLE before the deadline when the error does not clear, records nothing; the retry applies once', async (t) => {
    if (!supported) return t.skip('no failCommand');
    await failCommand(admin.db, 'alwaysOn', {
      failCommands: ['insert'],
      errorCode: 112,
      errorLabels: ['TransientTransactionError'],
      appName: APP,
    });
    const call = stepCall();
    const started = Date.now();
    const act = await failure(running.client.act(call, { deadlineMs: 2000 }));
    const compensation = await failure(running.client.compensate(stepCall(), { deadlineMs: 2000 }));
    const took = Date.now() - started;
    await failCommandOff(admin.db);
    for (const f of [act, compensation]) {
      assert.equal(f.code, status.UNAVAILABLE, f.details);
      assert.equal(f.status?.errorInfo?.reason, 'STORE_UNAVAILABLE');
      assert.match(f.details, /gave up after \d+ attempts within the call's deadline/);
    }
    assert.ok(took < 4000, `answered within the two 2 s deadlines (took ${took} ms)`);
    assert.equal(await count('operation_history', call.request_id), 0);
    assert.equal(await count('parcels', call.request_id), 0);
    const retry = await running.client.act(attempt(call, 2));
    assert.equal(retry.outcome, 'OUTCOME_APPLIED');
    assert.equal(retry.replayed, false);
    assert.equal(await count('parcels', call.request_id), 1);
  });

  it('does not record a non-transient store error, and answers it as INTERNAL', async (t) => {
    if (!supported) return t.skip('no failCommand');
    await failCommand(admin.db, { times: 1 }, { failCommands: ['insert'], errorCode: 2, appName: APP });
    const call = stepCall();
    const f = await failure(running.client.act(call));
    assert.equal(f.code, status.INTERNAL, f.details);
    assert.equal(await count('operation_history', call.request_id), 0);
    assert.equal((await running.client.act(call)).replayed, false);
  });

  it('sheds a call that cannot start before its deadline (UNAVAILABLE OVERLOADED), doing nothing', async () => {
    slowMs = 1500;
    const busy = [running.client.act(stepCall()), running.client.act(stepCall())];
    await sleep(200);
    const shed = stepCall();
    const started = Date.now();
    const f = await failure(running.client.act(shed, { deadlineMs: 600 }));
    assert.equal(f.code, status.UNAVAILABLE, f.details);
    assert.equal(f.status?.errorInfo?.reason, 'OVERLOADED');
    assert.ok(Date.now() - started < 600, 'answered before its deadline');
    await Promise.all(busy);
    assert.equal(await count('operation_history', shed.request_id), 0);
    assert.equal(running.participant.admission.inFlight, 0);
  });
});

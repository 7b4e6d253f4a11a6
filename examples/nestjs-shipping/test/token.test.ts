/**
 * The service token: with SERVICE_TOKEN set, Act, Compensate and the batch
 * calls need `authorization: Bearer <token>` and answer UNAUTHENTICATED
 * (ErrorInfo `auth.saga` SERVICE_TOKEN_REQUIRED) otherwise, before anything
 * is recorded or shipped; ListOperations takes the service or the admin
 * token (ADMIN_TOKEN).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { Db } from 'mongodb';
import { Participant, failure, openDb, startApp, stepCall, type RunningApp } from './harness.js';

const SERVICE = 'svc-token-0123456789';
const ADMIN = 'admin-token-9876543210';

describe('the service token', () => {
  let app: RunningApp;
  let participant: Participant;
  let db: Db;
  let closeDb: () => Promise<void>;

  before(async () => {
    app = await startApp({ SERVICE_TOKEN: SERVICE, ADMIN_TOKEN: ADMIN });
    participant = new Participant(app.port);
    ({ db, close: closeDb } = await openDb(app.database));
  });

  after(async () => {
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  it('Act, Compensate and the batches without it, with a wrong one or with the admin token: UNAUTHENTICATED, nothing recorded', async () => {
    const call = stepCall();
    const sends = [
      (options: { token?: string }) => participant.act(call, options),
      (options: { token?: string }) => participant.compensate(call, options),
      (options: { token?: string }) => participant.actBatch([call], options),
      (options: { token?: string }) => participant.compensateBatch([call], options),
    ];
    for (const token of [undefined, 'wrong', `${SERVICE}x`, ADMIN]) {
      for (const send of sends) {
        const { code, errorInfo } = await failure(send(token === undefined ? {} : { token }));
        assert.equal(code, status.UNAUTHENTICATED, `token ${token}`);
        assert.deepEqual([errorInfo?.domain, errorInfo?.reason], ['auth.saga', 'SERVICE_TOKEN_REQUIRED']);
      }
    }
    const { operations } = await participant.listOperations(call.request_id, { token: SERVICE });
    assert.deepEqual(operations, []);
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 0);
  });

  it('Act, Compensate and the batches with it: served', async () => {
    const call = stepCall();
    assert.equal((await participant.act(call, { token: SERVICE })).outcome, 'OUTCOME_APPLIED');
    assert.equal((await participant.compensate(call, { token: SERVICE })).effect, 'COMPENSATION_EFFECT_UNDONE');
    const batched = stepCall();
    const [act] = await participant.actBatch([batched], { token: SERVICE });
    assert.equal(act!.reply?.outcome, 'OUTCOME_APPLIED');
    const [compensation] = await participant.compensateBatch([batched], { token: SERVICE });
    assert.equal(compensation!.reply?.effect, 'COMPENSATION_EFFECT_UNDONE');
  });

  it('ListOperations: the service or the admin token, nothing else', async () => {
    const call = stepCall();
    await participant.act(call, { token: SERVICE });
    for (const token of [SERVICE, ADMIN]) {
      const { operations } = await participant.listOperations(call.request_id, { token });
      assert.deepEqual(operations.map((op) => op.status), ['applied']);
    }
    assert.equal((await failure(participant.listOperations(call.request_id))).code, status.UNAUTHENTICATED);
    assert.equal((await failure(participant.listOperations(call.request_id, { token: 'nope' }))).code, status.UNAUTHENTICATED);
  });
});

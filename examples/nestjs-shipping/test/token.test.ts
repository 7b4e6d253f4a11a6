/**
 * The service token: with SERVICE_TOKEN set, Act and Compensate need
 * `authorization: Bearer <token>` and answer UNAUTHENTICATED otherwise,
 * before anything is recorded; ListOperations takes the service or the admin
 * token.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { Participant, failure, startApp, stepCall, type RunningApp } from './harness.js';

const SERVICE = 'svc-token-0123456789';
const ADMIN = 'admin-token-9876543210';

describe('the service token', () => {
  let app: RunningApp;
  let participant: Participant;

  before(async () => {
    app = await startApp({ SERVICE_TOKEN: SERVICE, ADMIN_TOKEN: ADMIN });
    participant = new Participant(app.port);
  });

  after(async () => {
    participant?.close();
    assert.equal(await app?.stop(), 0);
  });

  it('Act and Compensate without it, with a wrong one or with the admin token: UNAUTHENTICATED, nothing recorded', async () => {
    const call = stepCall();
    for (const token of [undefined, 'wrong', `${SERVICE}x`, ADMIN]) {
      for (const send of [participant.act.bind(participant), participant.compensate.bind(participant)]) {
        const { code } = await failure(send(call, token === undefined ? {} : { token }));
        assert.equal(code, status.UNAUTHENTICATED, `token ${token}`);
      }
    }
    const { operations } = await participant.listOperations(call.request_id, { token: SERVICE });
    assert.deepEqual(operations, []);
  });

  it('Act and Compensate with it: served', async () => {
    const call = stepCall();
    assert.equal((await participant.act(call, { token: SERVICE })).outcome, 'OUTCOME_APPLIED');
    assert.equal((await participant.compensate(call, { token: SERVICE })).effect, 'COMPENSATION_EFFECT_UNDONE');
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

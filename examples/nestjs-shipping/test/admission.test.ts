/**
 * Load shedding, as SHIPPING_MAX_IN_FLIGHT sets it: with 1, a call that
 * arrives while another works waits its turn only while its deadline leaves
 * time, then is answered UNAVAILABLE (ErrorInfo OVERLOADED) with nothing
 * done; the call at work is not disturbed and the retry applies once. The
 * call at work is held by MongoDB's `failCommand` failpoint blocking its
 * first insert (needs a server with test commands enabled).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import type { Db } from 'mongodb';
import { Participant, attempt, failure, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('SHIPPING_MAX_IN_FLIGHT', () => {
  let app: RunningApp;
  let participant: Participant;
  let db: Db;
  let closeDb: () => Promise<void>;

  before(async () => {
    app = await startApp({ SHIPPING_MAX_IN_FLIGHT: '1' });
    participant = new Participant(app.port);
    ({ db, close: closeDb } = await openDb(app.database));
  });

  after(async () => {
    await db?.admin().command({ configureFailPoint: 'failCommand', mode: 'off' }).catch(() => undefined);
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  it('1: a second call waits within its deadline, then UNAVAILABLE OVERLOADED with nothing done', async (t) => {
    try {
      await db.admin().command({
        configureFailPoint: 'failCommand',
        mode: { times: 1 },
        data: { failCommands: ['insert'], blockConnection: true, blockTimeMS: 2000, appName: 'nestjs-shipping' },
      });
    } catch (error) {
      t.skip(`the MongoDB under test has no failCommand (start it with test commands enabled): ${String(error)}`);
      return;
    }
    const held = stepCall();
    const working = participant.act(held, { deadlineMs: 15_000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const shed = stepCall();
    const started = Date.now();
    const refused = await failure(participant.act(shed, { deadlineMs: 1000 }));
    assert.equal(refused.code, status.UNAVAILABLE, refused.details);
    assert.equal(refused.errorInfo?.reason, 'OVERLOADED');
    assert.ok(Date.now() - started < 1000, 'answered before its deadline');

    assert.equal((await working).outcome, 'OUTCOME_APPLIED', 'the call at work finished');
    assert.equal(await db.collection('operation_history').countDocuments({ request_id: shed.request_id }), 0);
    assert.equal(await db.collection('shipments').countDocuments({ request_id: shed.request_id }), 0);
    const retry = await participant.act(attempt(shed, 2));
    assert.equal(retry.outcome, 'OUTCOME_APPLIED');
    assert.equal(retry.replayed, false);
    assert.equal(await db.collection('shipments').countDocuments({ request_id: shed.request_id }), 1);
  });
});

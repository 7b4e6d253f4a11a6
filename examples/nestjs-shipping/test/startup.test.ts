/**
 * Start-up and retention: the indexes the barrier relies on, the records'
 * expiry from HISTORY_RETENTION_SECONDS, and a bad setting (a retention
 * below the minimum, a malformed number or token) refused with one line
 * naming the variable and exit code 2, before anything is served.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Participant, openDb, runAppToExit, startApp, stepCall } from './harness.js';

describe('start-up and history retention', () => {
  it('creates the unique (request_id, kind) index and the TTL index; records expire after 7 days by default', async () => {
    const app = await startApp();
    let participant: Participant | undefined;
    let close = async () => {};
    try {
      participant = new Participant(app.port);
      const opened = await openDb(app.database);
      close = opened.close;
      const db = opened.db;
      const indexes = await db.collection('operation_history').indexes();
      const unique = indexes.find((ix) => JSON.stringify(ix.key) === JSON.stringify({ request_id: 1, kind: 1 }));
      assert.equal(unique?.unique, true);
      const ttl = indexes.find((ix) => JSON.stringify(ix.key) === JSON.stringify({ expire_at: 1 }));
      assert.equal(ttl?.expireAfterSeconds, 0);

      const call = stepCall();
      await participant.act(call);
      const record = await db.collection('operation_history').findOne({ request_id: call.request_id });
      assert.ok(record);
      assert.equal(record.expire_at.getTime() - record.recorded_at.getTime(), 7 * 24 * 3600 * 1000);
    } finally {
      participant?.close();
      await close();
      assert.equal(await app.stop(), 0);
    }
  });

  it('HISTORY_RETENTION_SECONDS sets the expiry', async () => {
    const app = await startApp({ HISTORY_RETENTION_SECONDS: '3000' });
    let participant: Participant | undefined;
    let close = async () => {};
    try {
      participant = new Participant(app.port);
      const opened = await openDb(app.database);
      close = opened.close;
      const db = opened.db;
      const call = stepCall();
      await participant.compensate(call);
      const records = await db.collection('operation_history').find({ request_id: call.request_id }).toArray();
      assert.equal(records.length, 2);
      for (const record of records) {
        assert.equal(record.expire_at.getTime() - record.recorded_at.getTime(), 3000 * 1000);
      }
    } finally {
      participant?.close();
      await close();
      assert.equal(await app.stop(), 0);
    }
  });

  it('refuses to start below the minimum retention, with one line naming it', async () => {
    const below = await runAppToExit({ HISTORY_RETENTION_SECONDS: '2789' });
    assert.equal(below.code, 2);
    assert.equal(below.stdout, '', 'no READY line');
    assert.match(below.stderr, /HISTORY_RETENTION_SECONDS=2789 is below the minimum 2790/);
    const raised = await runAppToExit({ HISTORY_RETENTION_SECONDS: '3600', MIN_HISTORY_RETENTION_SECONDS: '7200' });
    assert.equal(raised.code, 2);
    assert.match(raised.stderr, /below the minimum 7200/);
    const garbage = await runAppToExit({ HISTORY_RETENTION_SECONDS: '7d' });
    assert.equal(garbage.code, 2);
    assert.match(garbage.stderr, /HISTORY_RETENTION_SECONDS="7d": expected a positive whole number of seconds/);
  });

  it('refuses a malformed SHIPPING_MAX_IN_FLIGHT or SERVICE_TOKEN, naming it', async () => {
    const inFlight = await runAppToExit({ SHIPPING_MAX_IN_FLIGHT: '0' });
    assert.equal(inFlight.code, 2);
    assert.match(inFlight.stderr, /^nestjs-shipping: SHIPPING_MAX_IN_FLIGHT="0": expected a positive whole number of calls$/m);
    const token = await runAppToExit({ SERVICE_TOKEN: 'two words' });
    assert.equal(token.code, 2);
    assert.match(token.stderr, /SERVICE_TOKEN: a token must not contain whitespace/);
  });
});

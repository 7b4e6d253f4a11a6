/**
 * The service token, the history's indexes and retention, and the
 * settings read from the environment.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import {
  ConfigError,
  DEFAULT_MIN_HISTORY_RETENTION_SECONDS,
  SagaParticipant,
  participantConfigFromEnv,
  silentLogger,
} from '../src/index.js';
import { failure, mongoUri, startParticipant, stepCall, type Running } from './harness.js';
import { ParcelStep } from './parcels.js';

describe('the service token', () => {
  let running: Running;

  before(async () => {
    running = await startParticipant(new ParcelStep(), { serviceToken: 's3cret', adminToken: 'adm1n' });
  });
  after(async () => {
    await running?.close();
  });

  it('refuses Act, Compensate and batches without it or with another, before anything is stored', async () => {
    const call = stepCall();
    for (const token of [undefined, 'wrong', 'adm1n']) {
      const options = token === undefined ? {} : { token };
      for (const f of [
        await failure(running.client.act(call, options)),
        await failure(running.client.compensate(call, options)),
        await failure(running.client.actBatch([call], options)),
        await failure(running.client.compensateBatch([call], options)),
      ]) {
        assert.equal(f.code, status.UNAUTHENTICATED);
        assert.equal(f.status?.errorInfo?.domain, 'auth.saga');
        assert.equal(f.status?.errorInfo?.reason, 'SERVICE_TOKEN_REQUIRED');
      }
    }
    assert.equal(await running.db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
    assert.equal((await running.client.act(call, { token: 's3cret' })).outcome, 'OUTCOME_APPLIED');
  });

  it('lets ListOperations read with the service or the admin token only', async () => {
    const call = stepCall();
    await running.client.act(call, { token: 's3cret' });
    for (const token of ['s3cret', 'adm1n']) {
      assert.equal((await running.client.listOperations(call.request_id, { token })).operations.length, 1);
    }
    const f = await failure(running.client.listOperations(call.request_id, { token: 'nope' }));
    assert.equal(f.code, status.UNAUTHENTICATED);
    assert.equal(f.status?.errorInfo?.reason, 'READ_TOKEN_REQUIRED');
    const bad = await failure(running.client.listOperations('', { token: 'adm1n' }));
    assert.equal(bad.code, status.INVALID_ARGUMENT);
    assert.equal(bad.status?.badRequest?.[0]?.field, 'request_id');
  });
});

describe('the history', () => {
  it('has the unique (request_id, kind) index and a TTL index, and records expire after the retention', async () => {
    const retention = 3 * 3600;
    const running = await startParticipant(new ParcelStep(), { historyRetentionSeconds: retention });
    try {
      const indexes = await running.db.collection('operation_history').indexes();
      const unique = indexes.find((i) => i.name === 'request_id_kind');
      assert.deepEqual(unique?.key, { request_id: 1, kind: 1 });
      assert.equal(unique?.unique, true);
      const ttl = indexes.find((i) => i.name === 'expire_at_ttl');
      assert.deepEqual(ttl?.key, { expire_at: 1 });
      assert.equal(ttl?.expireAfterSeconds, 0);
      const call = stepCall();
      await running.client.act(call);
      const record = await running.db.collection('operation_history').findOne({ request_id: call.request_id });
      assert.equal(record!.expire_at.getTime() - record!.recorded_at.getTime(), retention * 1000);
      assert.deepEqual(
        (await running.db.collection('parcels').indexes()).find((i) => i.name === 'request_id_line_index')?.key,
        { request_id: 1, line_index: 1 },
        'the step’s setup ran before serving',
      );
    } finally {
      await running.close();
    }
  });

  it('refuses a retention below the minimum at start-up, naming both', () => {
    assert.throws(
      () =>
        new SagaParticipant({
          mongodbUri: mongoUri(),
          handlers: new ParcelStep(),
          historyRetentionSeconds: 60,
          logger: silentLogger,
        }),
      (e: Error) => e instanceof ConfigError && /60/.test(e.message) && new RegExp(String(DEFAULT_MIN_HISTORY_RETENTION_SECONDS)).test(e.message),
    );
  });
});

describe('participantConfigFromEnv', () => {
  it('reads the settings with their defaults', () => {
    const config = participantConfigFromEnv({ MONGODB_URI: 'mongodb://db:27017', SHIP_LISTEN: '0.0.0.0:6000' }, { listen: 'SHIP_LISTEN' });
    assert.equal(config.listen, '0.0.0.0:6000');
    assert.equal(config.mongodbUri, 'mongodb://db:27017');
    assert.equal(config.database, 'participant');
    assert.equal(config.serviceToken, undefined);
    assert.equal(config.historyRetentionSeconds, 7 * 24 * 3600);
    assert.equal(config.maxInFlight, 32);
  });

  for (const [env, named] of [
    [{ HISTORY_RETENTION_SECONDS: '1h' }, 'HISTORY_RETENTION_SECONDS'],
    [{ HISTORY_RETENTION_SECONDS: '100' }, 'HISTORY_RETENTION_SECONDS'],
    [{ PARTICIPANT_MAX_IN_FLIGHT: '0' }, 'PARTICIPANT_MAX_IN_FLIGHT'],
    [{ SERVICE_TOKEN: 'two words' }, 'SERVICE_TOKEN'],
  ] as const) {
    it(`refuses ${JSON.stringify(env)} naming ${named}`, () => {
      assert.throws(() => participantConfigFromEnv(env), (e: Error) => e instanceof ConfigError && e.message.includes(named));
    });
  }
});

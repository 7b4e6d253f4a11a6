/**
 * The media-upload step against the fake media store and the MongoDB of
 * MONGODB_URI (SecantusDB in the project's test command): uploads once per
 * line under duplicates, a store that fails, hangs or loses the reply,
 * a compensation that fails and is retried until it succeeds, and a
 * participant SIGKILLed between the PUT and its commit.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { MongoClient } from 'mongodb';
import { PARTICIPANT_PROTOS, SagaParticipant, loaderOptions, silentLogger } from '@saga/participant';
import { startMediaStore } from '../src/media-store.js';
import { mediaStep, objectKey } from '../src/media-step.js';
import { readyPort } from './ready.js';

const MAIN = fileURLToPath(new URL('../src/main.js', import.meta.url));
const uri = process.env.MONGODB_URI;
if (!uri) throw new Error('MONGODB_URI is not set (scripts/test-examples.sh starts SecantusDB)');

function client(port) {
  const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(PARTICIPANT_PROTOS, loaderOptions()));
  const step = new pkg.participant.v1.SagaStepService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = (method) => (request, deadlineMs = 10_000) =>
    new Promise((resolve, reject) =>
      step[method](request, new grpc.Metadata(), { deadline: new Date(Date.now() + deadlineMs) }, (e, r) => (e ? reject(e) : resolve(r))),
    );
  return { act: call('Act'), compensate: call('Compensate'), close: () => step.close() };
}

function stepCall(lines = 2) {
  const saga = randomUUID();
  return {
    request_id: `${saga}:media`,
    saga_id: saga,
    step: 'media',
    attempt: 1,
    order: {
      order_id: `order-${saga}`,
      customer_id: 'alice',
      lines: Array.from({ length: lines }, (_, i) => ({ product_id: `photo-${i}`, quantity: '1', unit_price_cents: '100' })),
      total_cents: String(100 * lines),
    },
  };
}

const keysOf = (call) => call.order.lines.map((_, i) => objectKey(call.request_id, i));
const code = async (promise) => {
  try {
    await promise;
  } catch (e) {
    return e.code;
  }
  return 'OK';
};

describe('the media-upload step', () => {
  let store;
  let participant;
  let rpc;

  before(async () => {
    store = await startMediaStore();
    participant = await SagaParticipant.start({
      mongodbUri: uri,
      database: `media_test_${randomUUID().slice(0, 8)}`,
      listen: '127.0.0.1:0',
      logger: silentLogger,
      handlers: mediaStep({ storeUrl: store.url, callTimeoutMs: 500 }),
    });
    rpc = client(participant.port);
  });
  afterEach(() => store.clearFaults());
  after(async () => {
    rpc?.close();
    await participant?.close();
    await store?.close();
  });

  it('uploads one object per line once under 20 concurrent duplicates, and deletes them once', async () => {
    const call = stepCall(3);
    const replies = await Promise.all(Array.from({ length: 20 }, () => rpc.act(call)));
    assert.ok(replies.every((r) => r.outcome === 'OUTCOME_APPLIED'));
    assert.equal(replies.filter((r) => !r.replayed).length, 1);
    for (const key of keysOf(call)) assert.ok(store.objects.has(key), key);
    const uploads = await participant.db.collection('uploads').find({ request_id: call.request_id }).toArray();
    assert.deepEqual(uploads.map((u) => u.status), ['intended', 'intended', 'intended']);
    assert.equal((await participant.db.collection('operation_history').findOne({ request_id: call.request_id, kind: 'act' })).status, 'applied');
    const [first, again] = [await rpc.compensate(call), await rpc.compensate(call)];
    assert.equal(first.effect, 'COMPENSATION_EFFECT_UNDONE');
    assert.equal(again.replayed, true);
    for (const key of keysOf(call)) assert.ok(!store.objects.has(key), key);
  });

  for (const mode of ['fail', 'hang', 'lose']) {
    it(`answers UNAVAILABLE when the store's PUT ${mode}s, records nothing, and the retry uploads once`, async () => {
      const call = stepCall(2);
      store.fault('PUT', mode, 1);
      assert.equal(await code(rpc.act(call)), grpc.status.UNAVAILABLE);
      assert.equal(await participant.db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
      const retry = await rpc.act({ ...call, attempt: 2 });
      assert.equal(retry.outcome, 'OUTCOME_APPLIED');
      assert.equal(retry.replayed, false);
      for (const key of keysOf(call)) assert.ok(store.objects.has(key));
      assert.equal(store.objects.size >= 2, true);
    });
  }

  it('retries a failing compensation until it succeeds, then deletes once', async () => {
    const call = stepCall(2);
    await rpc.act(call);
    store.fault('DELETE', 'fail', 3);
    const answers = [];
    for (let attempt = 1; attempt <= 10; attempt += 1) {
      const answer = await code(rpc.compensate({ ...call, attempt }));
      answers.push(answer);
      if (answer === 'OK') break;
    }
    assert.deepEqual(answers.slice(-1), ['OK']);
    assert.ok(answers.filter((a) => a === grpc.status.UNAVAILABLE).length >= 1, JSON.stringify(answers));
    for (const key of keysOf(call)) assert.ok(!store.objects.has(key));
    const records = await participant.db.collection('operation_history').find({ request_id: call.request_id, kind: 'compensate' }).toArray();
    assert.equal(records.length, 1);
    assert.equal(records[0].status, 'undone');
  });
});

describe('a participant killed between the upload and its commit', () => {
  it('leaves no record; the null compensation deletes what was uploaded, and the late Act is refused', async () => {
    const store = await startMediaStore();
    const database = `media_crash_${randomUUID().slice(0, 8)}`;
    const mongo = new MongoClient(uri);
    let child;
    let second;
    try {
      await mongo.connect();
      const db = mongo.db(database);
      const env = { PATH: process.env.PATH ?? '', MONGODB_URI: uri, MONGODB_DATABASE: database, MEDIA_STORE_URL: store.url, MEDIA_LISTEN: '127.0.0.1:0' };
      const start = async () => {
        const c = spawn(process.execPath, [MAIN], { env, stdio: ['ignore', 'pipe', 'ignore'] });
        process.once('exit', () => c.kill('SIGKILL'));
        const port = await readyPort(c);
        return { child: c, port, exited: new Promise((resolve) => c.once('exit', resolve)) };
      };
      child = await start();
      const call = stepCall(2);
      store.fault('PUT', 'holdReply', 1);
      const first = client(child.port);
      const lost = code(first.act(call, 30_000));
      await store.waitHeld(1);
      assert.ok(store.objects.has(keysOf(call)[0]), 'the first object was uploaded');
      child.child.kill('SIGKILL');
      await child.exited;
      store.release();
      assert.equal(await lost, grpc.status.UNAVAILABLE);
      first.close();
      assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
      assert.equal(await db.collection('uploads').countDocuments({ request_id: call.request_id, status: 'intended' }), 2, 'the intents survived');

      second = await start();
      const rpc = client(second.port);
      // The killed process's transaction holds the act's key until the server aborts it: retry, as the orchestrator does.
      let compensation;
      for (const giveUp = Date.now() + 120_000; ; ) {
        try {
          compensation = await rpc.compensate(call, 5000);
          break;
        } catch (error) {
          if (error.code !== grpc.status.UNAVAILABLE && error.code !== grpc.status.DEADLINE_EXCEEDED) throw error;
          assert.ok(Date.now() < giveUp, 'the orphaned transaction was never aborted');
          await new Promise((resolve) => setTimeout(resolve, 500));
        }
      }
      assert.equal(compensation.effect, 'COMPENSATION_EFFECT_NULL_COMPENSATION');
      for (const key of keysOf(call)) assert.ok(!store.objects.has(key), `${key} deleted`);
      assert.equal(await db.collection('uploads').countDocuments({ request_id: call.request_id, status: 'deleted' }), 2);
      const late = await rpc.act(call);
      assert.equal(late.reason_code, 'ALREADY_COMPENSATED');
      assert.equal(store.objects.size, 0, 'the late Act uploaded nothing');
      rpc.close();
    } finally {
      child?.child.kill('SIGKILL');
      second?.child.kill('SIGTERM');
      if (second) await second.exited;
      await mongo.db(database).dropDatabase().catch(() => undefined);
      await mongo.close();
      await store.close();
    }
  });
});

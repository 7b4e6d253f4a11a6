/**
 * Failures that may pass: a TransientTransactionError that does not clear
 * within the call's deadline, and MongoDB down. Both answer UNAVAILABLE (the
 * orchestrator's "unknown, retry") and record nothing, so the retry with the
 * same request id applies the step exactly once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { MongoClient, type Db } from 'mongodb';
import { APP_DIR, Participant, attempt, failure, openDb, startApp, stepCall, type RunningApp } from './harness.js';

describe('a transient MongoDB error that outlasts the deadline', () => {
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
    await db?.admin().command({ configureFailPoint: 'failCommand', mode: 'off' }).catch(() => undefined);
    participant?.close();
    await closeDb?.();
    assert.equal(await app?.stop(), 0);
  });

  it('answers UNAVAILABLE and records nothing; the retry applies once', async (t) => {
    const failInserts = {
      configureFailPoint: 'failCommand',
      mode: 'alwaysOn',
      data: { failCommands: ['insert'], errorCode: 112, errorLabels: ['TransientTransactionError'], appName: 'nestjs-shipping' },
    };
    try {
      await db.admin().command(failInserts);
    } catch (error) {
      t.skip(`the MongoDB under test has no failCommand (start it with test commands enabled): ${String(error)}`);
      return;
    }
    const call = stepCall();
    const started = Date.now();
    const act = await failure(participant.act(call, { deadlineMs: 2000 }));
    const compensation = await failure(participant.compensate(stepCall(), { deadlineMs: 2000 }));
    await db.admin().command({ configureFailPoint: 'failCommand', mode: 'off' });
    assert.equal(act.code, status.UNAVAILABLE, act.details);
    assert.equal(compensation.code, status.UNAVAILABLE, compensation.details);
    assert.ok(Date.now() - started < 4000, 'answered within the deadlines');
    assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }), 0);
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 0);
    const retry = await participant.act(attempt(call, 2));
    assert.equal(retry.outcome, 'OUTCOME_APPLIED');
    assert.equal(retry.replayed, false);
    assert.equal(await db.collection('shipments').countDocuments({ request_id: call.request_id }), 1);
  });
});

const SECANTUSDB = path.resolve(APP_DIR, '../../scripts/secantusdb.sh');

describe('MongoDB down', () => {
  it('answers UNAVAILABLE within the call timeout and records nothing; after the restart the retry applies once', async (t) => {
    if (!existsSync(SECANTUSDB)) {
      t.skip(`needs ${SECANTUSDB} to run a MongoDB it may stop`);
      return;
    }
    const dir = mkdtempSync(path.join(os.tmpdir(), 'shipping-outage-'));
    const port = await freePort();
    const uri = `mongodb://127.0.0.1:${port}/?directConnection=true`;
    let server = await startSecantus(port, dir);
    let app: RunningApp | undefined;
    let participant: Participant | undefined;
    try {
      app = await startApp({ MONGODB_URI: uri });
      participant = new Participant(app.port);
      const before = stepCall();
      await participant.act(before);

      await stopProcess(server);
      const during = stepCall();
      const started = Date.now();
      const act = await failure(participant.act(during, { deadlineMs: 5000 }));
      const compensation = await failure(participant.compensate(before, { deadlineMs: 5000 }));
      assert.equal(act.code, status.UNAVAILABLE, act.details);
      assert.equal(compensation.code, status.UNAVAILABLE, compensation.details);
      assert.ok(Date.now() - started < 10_000, 'both answered within their 5 s deadlines');

      server = await startSecantus(port, dir);
      const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10_000 });
      const db = client.db(app.database);
      assert.equal(await db.collection('operation_history').countDocuments({ request_id: during.request_id }), 0);
      assert.equal(await db.collection('operation_history').countDocuments({ request_id: before.request_id, kind: 'compensate' }), 0);

      const retried = await untilAvailable(() => participant!.act(attempt(during, 2)));
      assert.equal(retried.outcome, 'OUTCOME_APPLIED');
      assert.equal((await untilAvailable(() => participant!.act(attempt(before, 2)))).replayed, true);
      const undone = await untilAvailable(() => participant!.compensate(attempt(before, 2)));
      assert.equal(undone.effect, 'COMPENSATION_EFFECT_UNDONE');
      assert.equal(await db.collection('shipments').countDocuments({ request_id: during.request_id }), 1);
      await client.close();
    } finally {
      participant?.close();
      if (app) assert.equal(await app.stop(), 0);
      await stopProcess(server);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Retries a call answered UNAVAILABLE (the driver finding the restarted server), as the orchestrator would. */
async function untilAvailable<T>(call: () => Promise<T>): Promise<T> {
  const giveUp = Date.now() + 20_000;
  for (;;) {
    try {
      return await call();
    } catch (error) {
      const code = (error as { code?: number }).code;
      if (code !== status.UNAVAILABLE || Date.now() > giveUp) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** SecantusDB on `port` over `dir` (kept across restarts), once it prints READY. */
function startSecantus(port: number, dir: string): Promise<ChildProcess> {
  const child = spawn('bash', [SECANTUSDB, '--port', String(port), '--storage-path', dir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`SecantusDB not READY within 90 s:\n${stderr}`));
    }, 90_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      if (/^READY \d+$/m.test(chunk.toString())) {
        clearTimeout(timer);
        resolve(child);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`SecantusDB exited (${code}) before READY:\n${stderr}`));
    });
  });
}

function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/**
 * A participant killed (SIGKILL) inside an Act's transaction, after the
 * step's writes and before the commit: nothing is applied — no record, no
 * parcel — and the retry, answered by a fresh process, applies it once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { status } from '@grpc/grpc-js';
import { ReadConcern } from 'mongodb';
import { StepClient, failure, freshDatabase, mongoUri, openDb, sleep, stepCall } from './harness.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/parcel-participant.js', import.meta.url));

interface Child {
  child: ChildProcess;
  port: number;
  /** Resolves with the first line matching `pattern` on stdout. */
  line: (pattern: RegExp) => Promise<string>;
  exited: Promise<number | null>;
}

async function spawnParticipant(database: string, env: Record<string, string> = {}): Promise<Child> {
  const child = spawn(process.execPath, [FIXTURE], {
    env: { PATH: process.env.PATH ?? '', MONGODB_URI: mongoUri(), MONGODB_DATABASE: database, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  let stdout = '';
  const waiters: (() => void)[] = [];
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    waiters.splice(0).forEach((w) => w());
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      process.off('exit', kill);
      resolve(code);
    }),
  );
  const line = (pattern: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${pattern} within 60 s; stdout: ${stdout}`)), 60_000);
      const check = () => {
        const match = pattern.exec(stdout);
        if (match) {
          clearTimeout(timer);
          resolve(match[0]);
        } else waiters.push(check);
      };
      check();
    });
  const ready = await line(/^READY (\d+)$/m);
  return { child, port: Number(/\d+/.exec(ready)![0]), line, exited };
}

describe('a participant killed inside its transaction', () => {
  it('leaves nothing applied, and the retry applies once', async () => {
    const database = freshDatabase('participant_crash');
    const { db, close } = await openDb(database);
    const majority = { readConcern: ReadConcern.MAJORITY };
    let second: Child | undefined;
    try {
      const first = await spawnParticipant(database, { HANG_IN_ACT: '1' });
      const client = new StepClient(first.port);
      const call = stepCall([{}, { product_id: 'sku-pear' }]);
      const answered = failure(client.act(call, { deadlineMs: 60_000 }));
      await first.line(new RegExp(`^IN_ACT ${call.request_id}$`, 'm'));
      first.child.kill('SIGKILL');
      assert.equal(await first.exited, null, 'killed by the signal');
      const lost = await answered;
      assert.equal(lost.code, status.UNAVAILABLE, lost.details);
      client.close();

      assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }, majority), 0);
      assert.equal(await db.collection('parcels').countDocuments({ request_id: call.request_id }, majority), 0);

      second = await spawnParticipant(database);
      const retryClient = new StepClient(second.port);
      // The killed process's transaction may hold the key until the server
      // aborts it: until then the retry answers UNAVAILABLE (nothing recorded), as the orchestrator's would.
      const started = Date.now();
      let unavailable = 0;
      let reply;
      for (;;) {
        try {
          reply = await retryClient.act({ ...call, attempt: 2 }, { deadlineMs: 5000 });
          break;
        } catch (error) {
          const code = (error as { code?: number }).code;
          assert.ok(code === status.UNAVAILABLE || code === status.DEADLINE_EXCEEDED, String(error));
          unavailable += 1;
          assert.ok(Date.now() - started < 120_000, 'the orphaned transaction was never aborted');
          await sleep(500);
        }
      }
      retryClient.close();
      assert.equal(reply.outcome, 'OUTCOME_APPLIED');
      assert.equal(reply.replayed, false, 'the killed attempt recorded nothing');
      assert.equal(await db.collection('parcels').countDocuments({ request_id: call.request_id }, majority), 2);
      assert.equal(await db.collection('operation_history').countDocuments({ request_id: call.request_id }, majority), 1);
      console.log(`# retry applied after ${Date.now() - started} ms and ${unavailable} UNAVAILABLE answers`);
    } finally {
      second?.child.kill('SIGTERM');
      if (second) await second.exited;
      await db.dropDatabase().catch(() => undefined);
      await close();
    }
  });
});

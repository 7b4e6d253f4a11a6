/**
 * The fake media store as a process (src/store-main.js), driven over its
 * admin routes as the Rust tests drive it: faults set and cleared, held
 * requests seen (and whether their caller still waits) and released, the
 * state read back; a bad fault refused; SIGTERM stops it with exit 0.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { readyPort } from './ready.js';

const MAIN = fileURLToPath(new URL('../src/store-main.js', import.meta.url));

describe('the media store as a process', () => {
  let child;
  let exited;
  let base;

  before(async () => {
    child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? '', MEDIA_STORE_LISTEN: '127.0.0.1:0' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    process.once('exit', () => child.kill('SIGKILL'));
    exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const port = await readyPort(child);
    base = `http://127.0.0.1:${port}`;
  });
  after(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });

  const state = async () => (await fetch(`${base}/admin/state`)).json();
  const fault = (query) => fetch(`${base}/admin/faults?${query}`, { method: 'POST' });

  it('injects a fault N times, then serves normally, and counts it', async () => {
    assert.equal((await fault('method=PUT&mode=fail&times=1')).status, 204);
    assert.equal((await fetch(`${base}/objects/k1`, { method: 'PUT', body: '{"a":1}' })).status, 500);
    assert.equal((await fetch(`${base}/objects/k1`, { method: 'PUT', body: '{"a":1}' })).status, 201);
    assert.equal((await fetch(`${base}/objects/k1`, { method: 'PUT', body: '{"a":2}' })).status, 200);
    const s = await state();
    assert.deepEqual(
      s.objects.map((o) => [o.key, o.body]),
      [['k1', '{"a":1}']],
    );
    assert.deepEqual(s.created, { k1: 1 });
    assert.equal(s.injected.fail, 1);
    assert.equal(s.counts.PUT, 3);
  });

  it('holds a reply, says whether its caller still waits, and releases it', async () => {
    assert.equal((await fault('method=PUT&mode=holdReply&times=1')).status, 204);
    const abort = new AbortController();
    const put = fetch(`${base}/objects/k2`, { method: 'PUT', body: '{}', signal: abort.signal }).catch((e) => e);
    let s;
    for (let i = 0; i < 100 && !(s = await state()).held.length; i += 1) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(s.held, [{ method: 'PUT', key: 'k2', client_gone_at: null }]);
    assert.ok(s.objects.some((o) => o.key === 'k2'), 'applied before its reply');
    abort.abort();
    await put;
    for (let i = 0; i < 100 && (s = await state()).held[0].client_gone_at === null; i += 1) await new Promise((r) => setTimeout(r, 20));
    assert.equal(typeof s.held[0].client_gone_at, 'number');
    const released = await (await fetch(`${base}/admin/release`, { method: 'POST' })).json();
    assert.deepEqual(released, { released: 1 });
    assert.deepEqual((await state()).held, []);
  });

  it('fails until cleared without times, and refuses a bad fault', async () => {
    assert.equal((await fault('method=DELETE&mode=fail')).status, 204);
    for (let i = 0; i < 3; i += 1) assert.equal((await fetch(`${base}/objects/k1`, { method: 'DELETE' })).status, 500);
    assert.equal((await fetch(`${base}/admin/faults`, { method: 'DELETE' })).status, 204);
    assert.equal((await fetch(`${base}/objects/k1`, { method: 'DELETE' })).status, 204);
    for (const bad of ['method=PATCH&mode=fail', 'method=PUT&mode=explode', 'method=PUT&mode=fail&times=0', 'method=toString&mode=fail']) {
      assert.equal((await fault(bad)).status, 400, bad);
    }
  });

  it('stops on SIGTERM with exit code 0', async () => {
    child.kill('SIGTERM');
    assert.deepEqual(await exited, { code: 0, signal: null });
  });
});

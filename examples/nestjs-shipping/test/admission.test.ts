/**
 * Load shedding (src/admission.ts): a call whose deadline has passed is not
 * started; no more than `maxInFlight` calls work at once, the others wait in
 * arrival order while their deadline leaves time and are refused
 * UNAVAILABLE, never run, when it does not.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Admission } from '../src/admission.js';
import { Unavailable } from '../src/errors.js';

/** A call that works until it is released. */
function held(admission: Admission, deadline: number, order: string[], name: string) {
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  const done = admission.run(deadline, async () => {
    order.push(name);
    await released;
    return name;
  });
  return { done, release: () => release() };
}

describe('admission', () => {
  it('refuses a call whose deadline has passed, without running it', async () => {
    const admission = new Admission(4);
    let ran = false;
    const work = async () => {
      ran = true;
      return 'done';
    };
    await assert.rejects(admission.run(Date.now() - 1, work), (e) => e instanceof Unavailable && /deadline passed/.test(e.message));
    assert.equal(ran, false);
    assert.equal(await admission.run(Date.now() + 5_000, work), 'done');
    assert.equal(await admission.run(Infinity, work), 'done', 'a call without a deadline is taken');
  });

  it('works at most maxInFlight calls at once; the next waits and runs, in arrival order, when a place frees', async () => {
    const admission = new Admission(2);
    const order: string[] = [];
    const soon = Date.now() + 10_000;
    const a = held(admission, soon, order, 'a');
    const b = held(admission, soon, order, 'b');
    const c = held(admission, soon, order, 'c');
    const d = held(admission, soon, order, 'd');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(order, ['a', 'b']);
    assert.equal(admission.inFlight, 2);
    assert.equal(admission.queued, 2);
    a.release();
    assert.equal(await a.done, 'a');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(order, ['a', 'b', 'c'], 'c, the first to wait, took the place');
    assert.equal(admission.inFlight, 2);
    b.release();
    c.release();
    d.release();
    assert.deepEqual(await Promise.all([b.done, c.done, d.done]), ['b', 'c', 'd']);
    assert.equal(admission.inFlight, 0);
    assert.equal(admission.queued, 0);
  });

  it('refuses a waiting call at its deadline, never running it', async () => {
    const admission = new Admission(1);
    const order: string[] = [];
    const busy = held(admission, Infinity, order, 'busy');
    let ran = false;
    const started = Date.now();
    await assert.rejects(
      admission.run(Date.now() + 400, async () => {
        ran = true;
      }),
      (e) => e instanceof Unavailable && /overloaded: 1 calls in flight/.test(e.message),
    );
    assert.equal(ran, false);
    assert.ok(Date.now() - started < 400, 'refused before its deadline (less the answer margin)');
    assert.equal(admission.queued, 0);
    busy.release();
    assert.equal(await busy.done, 'busy');
    assert.equal(await admission.run(Infinity, async () => 'after'), 'after');
  });

  it('frees its place when the work fails', async () => {
    const admission = new Admission(1);
    await assert.rejects(admission.run(Infinity, async () => Promise.reject(new Error('boom'))), /boom/);
    assert.equal(admission.inFlight, 0);
  });
});

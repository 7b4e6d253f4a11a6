/**
 * Load shedding (src/admission.ts): a call whose deadline has passed is not
 * started, and no more than `maxInFlight` calls run at once; both refusals
 * are UNAVAILABLE (retry later) with the work never run.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Admission } from '../src/admission.js';
import { Unavailable } from '../src/errors.js';

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

  it('runs at most maxInFlight calls at once and frees a place when one ends', async () => {
    const admission = new Admission(2);
    const releases: Array<() => void> = [];
    const held = () =>
      admission.run(Infinity, () => new Promise<string>((resolve) => releases.push(() => resolve('held'))));
    const first = held();
    const second = held();
    assert.equal(admission.inFlight, 2);
    let ran = false;
    await assert.rejects(
      admission.run(Infinity, async () => {
        ran = true;
      }),
      (e) => e instanceof Unavailable && /overloaded: 2 calls in flight/.test(e.message),
    );
    assert.equal(ran, false);
    releases[0]!();
    assert.equal(await first, 'held');
    assert.equal(admission.inFlight, 1);
    assert.equal(await admission.run(Infinity, async () => 'after'), 'after');
    releases[1]!();
    assert.equal(await second, 'held');
    assert.equal(admission.inFlight, 0);
  });

  it('frees its place when the work fails', async () => {
    const admission = new Admission(1);
    await assert.rejects(admission.run(Infinity, async () => Promise.reject(new Error('boom'))), /boom/);
    assert.equal(admission.inFlight, 0);
  });
});

/**
 * The conflict limit (src/conflict-limit.ts): conflicts halve how many
 * transactions run at once, commits raise it back; and through `transact`
 * on MongoDB, transactions that write one document at the same time each
 * apply once while their conflicts lower the limit.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { COMMITS_TO_RISE, ConflictLimit, MAX_TRANSACTIONS, conflictLimitOf, transact } from '../src/index.js';
import { openDb, sleep } from './harness.js';

describe('the conflict limit', () => {
  it('halves on a conflict down to one, rises by one after max(limit, 8) commits', async () => {
    const limit = new ConflictLimit(8);
    const held = await Promise.all(Array.from({ length: 8 }, () => limit.acquire()));
    assert.equal(limit.inUse, 8);
    held[0]!.conflicted();
    assert.equal(limit.limit, 4);
    for (const p of held.slice(1)) p!.conflicted();
    assert.equal(limit.limit, 1);
    for (const p of held) p!.release();
    for (let expected = 2; expected <= 8; expected += 1) {
      for (let i = 0; i < Math.max(expected - 1, COMMITS_TO_RISE); i += 1) {
        const p = await limit.acquire();
        p!.committed();
        p!.release();
      }
      assert.equal(limit.limit, expected);
    }
  });

  it('never lets more run at once than the limit, and a waiter past its deadline gets none', async () => {
    const limit = new ConflictLimit(4);
    let running = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const permit = await limit.acquire();
        assert.ok(permit);
        running += 1;
        most = Math.max(most, running);
        await sleep(1);
        running -= 1;
        if (i % 5 === 0) permit.conflicted();
        else permit.committed();
        permit.release();
      }),
    );
    assert.ok(most <= 4, `most at once: ${most}`);
    assert.equal(limit.inUse, 0);
    const one = new ConflictLimit(1);
    const held = await one.acquire();
    assert.equal(await one.acquire(Date.now() + 30), undefined);
    held!.release();
    const next = await one.acquire(Date.now() + 30);
    assert.ok(next, 'a permit once the holder gave it back');
    next.release();
  });

  it('on MongoDB: 16 transactions writing one document at once each apply once and lower the limit', async () => {
    const { db, client, close } = await openDb(`conflict_limit_${Date.now()}`);
    try {
      const hits = db.collection<{ _id: string; hits: number }>('hits');
      await hits.insertOne({ _id: 'hot', hits: 0 });
      assert.equal(conflictLimitOf(client).limit, MAX_TRANSACTIONS);
      await Promise.all(
        Array.from({ length: 16 }, () =>
          transact(client, Date.now() + 20_000, async (session) => {
            await hits.updateOne({ _id: 'hot' }, { $inc: { hits: 1 } }, { session });
            await sleep(20); // holds the document: every other writer meanwhile conflicts
          }),
        ),
      );
      assert.equal((await hits.findOne({ _id: 'hot' }))?.hits, 16);
      assert.ok(conflictLimitOf(client).limit < MAX_TRANSACTIONS / 2, `limit ${conflictLimitOf(client).limit}`);
    } finally {
      await db.dropDatabase().catch(() => undefined);
      await close();
    }
  });
});

/**
 * The step the package's tests run: packing parcels, one per order line
 * (`insertPerLine`, keyed by request id and line index), refused for a
 * product named `sku-unshippable`, undone by marking its parcels returned.
 * `hooks` let a test slow a call down, fail it, or watch a null
 * compensation, and `counts` say how often each function ran (transaction
 * attempts included — what committed is read from the database).
 */
import type { ClientSession, Db } from 'mongodb';
import {
  applied,
  ensurePerLineIndex,
  insertPerLine,
  refused,
  undone,
  type ActContext,
  type ActOutcome,
  type CompensateContext,
  type CompensateOutcome,
  type StepCall,
  type StepHandlers,
} from '../src/index.js';

export interface ParcelHooks {
  /** Runs inside `act` after the parcels were inserted (throw to crash the transaction). */
  afterInsert?: (call: StepCall, session: ClientSession) => Promise<void>;
  /** Runs inside `compensate` before the parcels are marked returned. */
  beforeUndo?: (call: StepCall) => Promise<void>;
}

export class ParcelStep implements StepHandlers {
  readonly counts = { act: 0, compensate: 0, unapplied: 0 };

  constructor(readonly hooks: ParcelHooks = {}) {}

  async setup(db: Db): Promise<void> {
    await ensurePerLineIndex(db.collection('parcels'));
  }

  async act(call: StepCall, session: ClientSession, { db }: ActContext): Promise<ActOutcome> {
    this.counts.act += 1;
    const parcels = await insertPerLine(
      db.collection('parcels'),
      call,
      call.order.lines.map((line) => ({ product_id: line.product_id, quantity: line.quantity, status: 'packed' })),
      session,
    );
    await this.hooks.afterInsert?.(call, session);
    const unshippable = call.order.lines.findIndex((line) => line.product_id === 'sku-unshippable');
    if (unshippable >= 0) return refused('UNSHIPPABLE', `line ${unshippable} cannot be shipped`);
    return applied(`${parcels.length} parcels`, { parcels: parcels.length });
  }

  async compensate(call: StepCall, session: ClientSession, { db, act }: CompensateContext): Promise<CompensateOutcome> {
    this.counts.compensate += 1;
    await this.hooks.beforeUndo?.(call);
    const result = await db
      .collection('parcels')
      .updateMany({ request_id: call.request_id, status: 'packed' }, { $set: { status: 'returned' } }, { session });
    return undone(`${result.modifiedCount} of ${(act.data as { parcels: number }).parcels} parcels returned`);
  }

  async compensateUnapplied(call: StepCall, session: ClientSession, { db }: ActContext): Promise<void> {
    this.counts.unapplied += 1;
    await db.collection('unapplied').insertOne({ request_id: call.request_id }, { session });
  }
}

/**
 * The operationHistory barrier: every row of the table in
 * docs/participant-protocol.md, over MongoDB, around a team's `act` and
 * `compensate`.
 *
 * | call                                   | recorded (one transaction)                       | answer                          |
 * |----------------------------------------|--------------------------------------------------|---------------------------------|
 * | first Act                              | `act applied` + the handler's effect             | APPLIED                         |
 * | first Act, the handler refuses         | `act refused` alone (the handler's writes dropped) | REFUSED with its reason code  |
 * | Act repeated, same parameters          | nothing                                          | the recorded answer, replayed   |
 * | Act or Compensate, other parameters    | nothing                                          | ALREADY_EXISTS naming the field |
 * | Compensate after an applied Act        | `compensate undone` + the handler's undo         | UNDONE                          |
 * | Compensate repeated                    | nothing                                          | the recorded answer, replayed   |
 * | Compensate after a refused Act         | `compensate nothing_to_undo`                     | NOTHING_TO_UNDO                 |
 * | Compensate before its Act              | `compensate null_compensation` + `act blocked` (+ `compensateUnapplied`) | NULL_COMPENSATION               |
 * | Act after its Compensate               | nothing (`blocked` holds the key)                | REFUSED ALREADY_COMPENSATED     |
 * | Act repeated after its undo            | nothing                                          | REFUSED ALREADY_COMPENSATED     |
 * | concurrent duplicates                  | one winner; the others roll back                 | the winner's answer, replayed   |
 *
 * Who wins is decided by the unique index on `(request_id, kind)` alone:
 * a call inserts its record **first** (so a duplicate stops at the key
 * before the handler runs: a WriteConflict while the winner is uncommitted,
 * retried, then the duplicate-key error once it committed) and, when the
 * key is taken, rolls back and answers from the record that holds it. A
 * Compensate reads the Act's record first, inside its transaction, to know
 * what to undo; an Act that commits after that read makes the Compensate's
 * own writes conflict (the `blocked` record it inserts), so it starts over
 * and sees the Act: an applied effect is never left behind a compensation.
 */
import type { ClientSession, Collection, Db, MongoClient } from 'mongodb';
import { ALREADY_COMPENSATED, Corrupt, ParameterMismatch, Unavailable, isDuplicateKey } from './errors.js';
import { difference, fingerprint, newRecord, paramsOf, type Kind, type OperationRecord, type RecordStatus } from './records.js';
import type { ActOutcome, CompensateOutcome, Listing, StepHandlers } from './step.js';
import { KeyTaken, budgetEnd, insertRecord, transact } from './transaction.js';
import type { StepCall } from './validate.js';
import type { ActReply, CompensateReply, CompensationEffect } from './wire.js';

/** How many times a Compensate starts over when an Act took the key under it. */
const MAX_COMPENSATE_RESTARTS = 5;

/** A reason code: stable and machine-readable. */
const REASON_CODE = /^[A-Z][A-Z0-9_]{0,63}$/;

/** Thrown inside the Act's transaction to roll the handler's writes back before recording its refusal. */
class RollBackForRefusal extends Error {
  constructor(readonly refusal: { reasonCode: string; detail: string }) {
    super('refused');
  }
}

export interface BarrierOptions {
  client: MongoClient;
  db: Db;
  history: Collection<OperationRecord>;
  handlers: StepHandlers;
  retentionSeconds: number;
}

export class Barrier {
  private readonly client: MongoClient;
  private readonly db: Db;
  private readonly history: Collection<OperationRecord>;
  private readonly handlers: StepHandlers;
  private readonly retentionSeconds: number;

  constructor(options: BarrierOptions) {
    this.client = options.client;
    this.db = options.db;
    this.history = options.history;
    this.handlers = options.handlers;
    this.retentionSeconds = options.retentionSeconds;
  }

  /** Does the step once per request id (or records its refusal); `deadline` in ms since the epoch or Infinity. */
  async act(call: StepCall, deadline: number): Promise<ActReply> {
    const until = budgetEnd(deadline);
    const listing = this.listing(call);
    try {
      return await transact(this.client, until, async (session) => {
        // The record first: a duplicate stops at the key before the handler writes anything.
        await insertRecord(this.history, newRecord(call, 'act', 'applied', this.retentionSeconds, listing), session);
        const outcome = checkActOutcome(await this.handlers.act(call, session, { db: this.db, deadline }));
        if (outcome.outcome === 'refused') throw new RollBackForRefusal(outcome);
        if (outcome.detail !== '' || outcome.data !== null) {
          await this.history.updateOne(
            { request_id: call.request_id, kind: 'act' },
            { $set: { detail: outcome.detail, data: outcome.data } },
            { session },
          );
        }
        return applied(outcome.detail, false);
      });
    } catch (error) {
      if (error instanceof KeyTaken) return this.replayAct(call);
      if (error instanceof RollBackForRefusal) return this.recordRefusal(call, error.refusal, until, listing);
      // The handler's own unique key (e.g. per-line documents) lost to a committed duplicate.
      if (isDuplicateKey(error) && (await this.exists(call, 'act'))) return this.replayAct(call);
      throw error;
    }
  }

  /** Undoes the step once per request id, or records that there was nothing to undo or no Act yet. */
  async compensate(call: StepCall, deadline: number): Promise<CompensateReply> {
    const until = budgetEnd(deadline);
    const listing = this.listing(call);
    for (let restart = 0; ; restart += 1) {
      try {
        return await transact(this.client, until, async (session) => {
          const act = await this.history.findOne({ request_id: call.request_id, kind: 'act' }, { session });
          if (act) checkParameters(call, act);
          return await this.compensateAfter(call, act, session, deadline, listing);
        });
      } catch (error) {
        if (error instanceof KeyTaken && error.kind === 'compensate') return this.replayCompensate(call);
        // The Act committed between this transaction's read and its `blocked` insert: start over, now seeing it.
        if (error instanceof KeyTaken && restart < MAX_COMPENSATE_RESTARTS && Date.now() < until) continue;
        if (error instanceof KeyTaken) throw new Unavailable('the Act kept taking the key first; retry');
        if (isDuplicateKey(error) && (await this.exists(call, 'compensate'))) return this.replayCompensate(call);
        throw error;
      }
    }
  }

  /** The compensation's writes, given the Act's record as the transaction saw it. */
  private async compensateAfter(
    call: StepCall,
    act: OperationRecord | null,
    session: ClientSession,
    deadline: number,
    listing: { subject: string; amount: string },
  ): Promise<CompensateReply> {
    const record = (kind: Kind, status: RecordStatus, extra: Parameters<typeof newRecord>[5] = {}) =>
      newRecord(call, kind, status, this.retentionSeconds, listing, extra);
    if (act === null) {
      const detail = 'the Act never arrived; it will be refused if it does';
      await insertRecord(this.history, record('compensate', 'null_compensation', { detail }), session);
      await insertRecord(this.history, record('act', 'blocked', { reason_code: ALREADY_COMPENSATED }), session);
      await this.handlers.compensateUnapplied?.(call, session, { db: this.db, deadline });
      return compensated('COMPENSATION_EFFECT_NULL_COMPENSATION', detail, false);
    }
    switch (act.status) {
      case 'applied': {
        // The record first: a repeat stops at the key before anything is undone twice.
        await insertRecord(this.history, record('compensate', 'undone'), session);
        const outcome = checkCompensateOutcome(
          await this.handlers.compensate(call, session, {
            db: this.db,
            deadline,
            act: { detail: act.detail, data: act.data ?? null, recordedAt: act.recorded_at },
          }),
        );
        if (outcome.effect !== 'undone' || outcome.detail !== '') {
          await this.history.updateOne(
            { request_id: call.request_id, kind: 'compensate' },
            { $set: { status: outcome.effect, detail: outcome.detail } },
            { session },
          );
        }
        return compensated(effectOf(outcome.effect), outcome.detail, false);
      }
      case 'refused': {
        const detail = `nothing to undo: the Act was refused (${act.reason_code})`;
        await insertRecord(this.history, record('compensate', 'nothing_to_undo', { detail }), session);
        return compensated('COMPENSATION_EFFECT_NOTHING_TO_UNDO', detail, false);
      }
      // A compensation blocked the Act, in the transaction that recorded itself.
      case 'blocked':
        throw new KeyTaken('compensate');
      default:
        throw corrupt(call, act);
    }
  }

  /** Records a refusal the handler decided, in a transaction of its own (the handler's writes were dropped). */
  private async recordRefusal(
    call: StepCall,
    refusal: { reasonCode: string; detail: string },
    until: number,
    listing: { subject: string; amount: string },
  ): Promise<ActReply> {
    const row = newRecord(call, 'act', 'refused', this.retentionSeconds, listing, {
      reason_code: refusal.reasonCode,
      detail: refusal.detail,
    });
    try {
      await transact(this.client, until, (session) => insertRecord(this.history, row, session));
      return refused(refusal.reasonCode, refusal.detail, false);
    } catch (error) {
      if (error instanceof KeyTaken) return this.replayAct(call);
      throw error;
    }
  }

  /** The answer to an Act whose key was taken, from the record that holds it. */
  private async replayAct(call: StepCall): Promise<ActReply> {
    const act = await this.recorded(call, 'act');
    switch (act.status) {
      case 'applied': {
        const compensation = await this.history.findOne({ request_id: call.request_id, kind: 'compensate' });
        if (compensation?.status === 'undone') return alreadyCompensated('its effect was undone since');
        return applied(act.detail, true);
      }
      case 'refused':
        return refused(act.reason_code, act.detail, true);
      case 'blocked':
        return alreadyCompensated('it was compensated before it arrived');
      default:
        throw corrupt(call, act);
    }
  }

  /** The answer to a Compensate recorded before. */
  private async replayCompensate(call: StepCall): Promise<CompensateReply> {
    const compensation = await this.recorded(call, 'compensate');
    const effect = EFFECTS[compensation.status];
    if (effect === undefined) throw corrupt(call, compensation);
    return compensated(effect, compensation.detail, true);
  }

  /** The committed record under the call's key, checked against the call's parameters. */
  private async recorded(call: StepCall, kind: Kind): Promise<OperationRecord> {
    const record = await this.history.findOne({ request_id: call.request_id, kind });
    // Only possible when it expired between the two reads: nothing is known now, so retry.
    if (record === null) throw new Unavailable(`the ${kind} record that held the key is gone; retry`);
    checkParameters(call, record);
    return record;
  }

  private async exists(call: StepCall, kind: Kind): Promise<boolean> {
    return (await this.history.countDocuments({ request_id: call.request_id, kind }, { limit: 1 })) > 0;
  }

  private listing(call: StepCall): { subject: string; amount: string } {
    const listing: Listing = this.handlers.listing
      ? this.handlers.listing(call)
      : { subject: call.order.customer_id, amount: call.order.total_cents };
    return { subject: String(listing.subject), amount: String(listing.amount) };
  }
}

const EFFECTS: Partial<Record<RecordStatus, CompensationEffect>> = {
  undone: 'COMPENSATION_EFFECT_UNDONE',
  null_compensation: 'COMPENSATION_EFFECT_NULL_COMPENSATION',
  nothing_to_undo: 'COMPENSATION_EFFECT_NOTHING_TO_UNDO',
};

function effectOf(effect: CompensateOutcome['effect']): CompensationEffect {
  return effect === 'undone' ? 'COMPENSATION_EFFECT_UNDONE' : 'COMPENSATION_EFFECT_NOTHING_TO_UNDO';
}

function checkActOutcome(outcome: ActOutcome): ActOutcome {
  if (outcome?.outcome === 'applied' && typeof outcome.detail === 'string') {
    return { outcome: 'applied', detail: outcome.detail, data: outcome.data ?? null };
  }
  if (outcome?.outcome === 'refused' && typeof outcome.detail === 'string') {
    if (!REASON_CODE.test(outcome.reasonCode)) {
      throw new TypeError(
        `act returned refused(${JSON.stringify(outcome.reasonCode)}): a reason code is 1 to 64 of A-Z 0-9 _, starting with a letter`,
      );
    }
    return outcome;
  }
  throw new TypeError(`act must return applied(...) or refused(...), got ${JSON.stringify(outcome)}`);
}

function checkCompensateOutcome(outcome: CompensateOutcome): CompensateOutcome {
  if ((outcome?.effect === 'undone' || outcome?.effect === 'nothing_to_undo') && typeof outcome.detail === 'string') {
    return outcome;
  }
  throw new TypeError(`compensate must return undone(...) or nothingToUndo(...), got ${JSON.stringify(outcome)}`);
}

function checkParameters(call: StepCall, record: OperationRecord): void {
  const params = paramsOf(call);
  if (fingerprint(params) !== record.fingerprint) {
    const { field, text } = difference(record.params, params);
    throw new ParameterMismatch(call.request_id, record.kind, field, text);
  }
}

function corrupt(call: StepCall, record: OperationRecord): Corrupt {
  const key = JSON.stringify(call.request_id);
  return new Corrupt(`request_id ${key}: ${record.kind} record in unexpected state ${record.status}`);
}

function applied(detail: string, replayed: boolean): ActReply {
  return { outcome: 'OUTCOME_APPLIED', reason_code: '', detail, replayed };
}

function refused(reasonCode: string, detail: string, replayed: boolean): ActReply {
  return { outcome: 'OUTCOME_REFUSED', reason_code: reasonCode, detail, replayed };
}

function alreadyCompensated(why: string): ActReply {
  return refused(ALREADY_COMPENSATED, `not applied: ${why}`, true);
}

function compensated(effect: CompensationEffect, detail: string, replayed: boolean): CompensateReply {
  return { effect, detail, replayed };
}

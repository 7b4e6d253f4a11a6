/**
 * The operationHistory barrier for the shipping step: every row of the table
 * in docs/participant-protocol.md, over MongoDB.
 *
 * | call                                   | recorded (one transaction)           | answer                         |
 * |----------------------------------------|--------------------------------------|--------------------------------|
 * | first Act                              | shipment + `act applied`, or `act refused` | APPLIED / REFUSED UNSHIPPABLE |
 * | Act repeated, same parameters          | nothing                              | the recorded answer, replayed  |
 * | Act or Compensate, other parameters    | nothing                              | ALREADY_EXISTS naming the field |
 * | Compensate after an applied Act        | shipment cancelled + `compensate undone` | UNDONE                     |
 * | Compensate repeated                    | nothing                              | the recorded answer, replayed  |
 * | Compensate after a refused Act         | `compensate nothing_to_undo`         | NOTHING_TO_UNDO                |
 * | Compensate before its Act              | `compensate null_compensation` + `act blocked` | NULL_COMPENSATION    |
 * | Act after its Compensate               | nothing (`blocked` holds the key)    | REFUSED ALREADY_COMPENSATED    |
 * | concurrent duplicates                  | one winner; the others roll back     | the winner's answer, replayed  |
 *
 * Who wins is decided by the unique index on `(request_id, kind)` alone
 * (transaction.ts): a call inserts its record and, when the key is taken,
 * rolls back and answers from the record that holds it. A Compensate does
 * read the Act's record first, inside its transaction, to know what to undo;
 * a concurrent Act that commits after that read makes the Compensate's own
 * writes conflict (the `blocked` record it inserts, or the shipment it
 * cancels), so it is retried and sees the Act: an applied shipment is never
 * left behind a compensation.
 */
import type { ClientSession } from 'mongodb';
import { Corrupt, ParameterMismatch, Unavailable } from './errors.js';
import type { Store } from './db.js';
import { difference, fingerprint, newRecord, type Kind, type OperationRecord } from './records.js';
import { cancelShipment, createShipment, firstUnshippable, newShipmentId } from './shipments.js';
import { KeyTaken, budgetEnd, insertRecord, transact } from './transaction.js';
import type { CheckedCall } from './validate.js';
import type { ActReply, CompensateReply, CompensationEffect } from './wire.js';

export const UNSHIPPABLE = 'UNSHIPPABLE';
export const ALREADY_COMPENSATED = 'ALREADY_COMPENSATED';

/** How many times a Compensate starts over when an Act took the key under it. */
const MAX_COMPENSATE_RESTARTS = 5;

export class Barrier {
  constructor(
    private readonly store: Store,
    private readonly retentionSeconds: number,
  ) {}

  /** Ships the order once per request id (or refuses it, recorded). */
  async act(call: CheckedCall, deadline: number): Promise<ActReply> {
    try {
      return await transact(this.store.client, budgetEnd(deadline), async (session) => {
        const product = await firstUnshippable(this.store, call.params, session);
        if (product !== null) {
          const detail = `product ${product} cannot be shipped`;
          const refusal = this.record(call, 'act', 'refused', { reason_code: UNSHIPPABLE, detail });
          await insertRecord(this.store.history, refusal, session);
          return refused(UNSHIPPABLE, detail, false);
        }
        // The record first: a duplicate stops at the key before writing anything else.
        const shipmentId = newShipmentId();
        const detail = `shipment ${shipmentId}`;
        await insertRecord(
          this.store.history,
          this.record(call, 'act', 'applied', { detail, shipment_id: shipmentId }),
          session,
        );
        await createShipment(this.store, shipmentId, call.requestId, call.params, session);
        return applied(detail, false);
      });
    } catch (error) {
      if (error instanceof KeyTaken) return this.replayAct(call);
      throw error;
    }
  }

  /** Cancels the order's shipment once per request id, or records that there was none. */
  async compensate(call: CheckedCall, deadline: number): Promise<CompensateReply> {
    const until = budgetEnd(deadline);
    for (let restart = 0; ; restart += 1) {
      try {
        return await transact(this.store.client, until, async (session) => {
          const act = await this.store.history.findOne({ request_id: call.requestId, kind: 'act' }, { session });
          if (act) checkParameters(call, act);
          return await this.compensateAfter(call, act, session);
        });
      } catch (error) {
        if (error instanceof KeyTaken && error.kind === 'compensate') return this.replayCompensate(call);
        // The Act committed between this transaction's read and its `blocked` insert: start over, now seeing it.
        if (error instanceof KeyTaken && restart < MAX_COMPENSATE_RESTARTS && Date.now() < until) continue;
        if (error instanceof KeyTaken) throw new Unavailable('the Act kept taking the key first; retry');
        throw error;
      }
    }
  }

  /** The compensation's writes, given the Act's record as the transaction saw it. */
  private async compensateAfter(
    call: CheckedCall,
    act: OperationRecord | null,
    session: ClientSession,
  ): Promise<CompensateReply> {
    const history = this.store.history;
    if (act === null) {
      const detail = 'the Act never arrived; it will be refused if it does';
      await insertRecord(history, this.record(call, 'compensate', 'null_compensation', { detail }), session);
      await insertRecord(history, this.record(call, 'act', 'blocked', { reason_code: ALREADY_COMPENSATED }), session);
      return compensated('COMPENSATION_EFFECT_NULL_COMPENSATION', detail, false);
    }
    switch (act.status) {
      case 'applied': {
        const detail = `shipment ${act.shipment_id} cancelled`;
        const undone = this.record(call, 'compensate', 'undone', { detail, shipment_id: act.shipment_id });
        await insertRecord(history, undone, session);
        if (act.shipment_id === null || !(await cancelShipment(this.store, act.shipment_id, session))) {
          throw new Corrupt(
            `request_id ${JSON.stringify(call.requestId)}: shipment ${act.shipment_id} of an applied act is not a created shipment`,
          );
        }
        return compensated('COMPENSATION_EFFECT_UNDONE', detail, false);
      }
      case 'refused': {
        const detail = `nothing to undo: the Act was refused (${act.reason_code})`;
        await insertRecord(history, this.record(call, 'compensate', 'nothing_to_undo', { detail }), session);
        return compensated('COMPENSATION_EFFECT_NOTHING_TO_UNDO', detail, false);
      }
      // A compensation blocked the Act, in the transaction that recorded it.
      case 'blocked':
        throw new KeyTaken('compensate');
      default:
        throw corrupt(call, act);
    }
  }

  /** The answer to an Act whose key was taken, from the record that holds it. */
  private async replayAct(call: CheckedCall): Promise<ActReply> {
    const act = await this.recorded(call, 'act');
    switch (act.status) {
      case 'applied': {
        const compensation = await this.store.history.findOne({ request_id: call.requestId, kind: 'compensate' });
        if (compensation?.status === 'undone') return alreadyCompensated('its shipment was cancelled since');
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
  private async replayCompensate(call: CheckedCall): Promise<CompensateReply> {
    const compensation = await this.recorded(call, 'compensate');
    const effects: Partial<Record<OperationRecord['status'], CompensationEffect>> = {
      undone: 'COMPENSATION_EFFECT_UNDONE',
      null_compensation: 'COMPENSATION_EFFECT_NULL_COMPENSATION',
      nothing_to_undo: 'COMPENSATION_EFFECT_NOTHING_TO_UNDO',
    };
    const effect = effects[compensation.status];
    if (effect === undefined) throw corrupt(call, compensation);
    return compensated(effect, compensation.detail, true);
  }

  /** The committed record under the call's key, checked against the call's parameters. */
  private async recorded(call: CheckedCall, kind: Kind): Promise<OperationRecord> {
    const record = await this.store.history.findOne({ request_id: call.requestId, kind });
    // Only possible when it expired between the two reads: nothing is known now, so retry.
    if (record === null) throw new Unavailable(`the ${kind} record that held the key is gone; retry`);
    checkParameters(call, record);
    return record;
  }

  private record(
    call: CheckedCall,
    kind: Kind,
    status: OperationRecord['status'],
    extra: Parameters<typeof newRecord>[5],
  ): OperationRecord {
    return newRecord(call.requestId, call.params, kind, status, this.retentionSeconds, extra);
  }
}

function checkParameters(call: CheckedCall, record: OperationRecord): void {
  if (fingerprint(call.params) !== record.fingerprint) {
    throw new ParameterMismatch(call.requestId, record.kind, difference(record.params, call.params));
  }
}

function corrupt(call: CheckedCall, record: OperationRecord): Corrupt {
  const key = JSON.stringify(call.requestId);
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

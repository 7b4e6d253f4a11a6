/**
 * What a team writes: a step's two functions, `act` and `compensate`, each
 * given the checked call and the MongoDB `ClientSession` of the transaction
 * the barrier's record is written in — pass `{ session }` to every read and
 * write, and the effect commits together with its record or not at all.
 *
 * The package calls `act` at most once per request id in a transaction that
 * commits (a duplicate stops at the record's unique key before `act` runs,
 * or is rolled back whole), and `compensate` at most once, only for an act
 * that was applied. Neither is ever told about retries, replays or late
 * calls: the barrier answers those from the records.
 */
import type { ClientSession, Db } from 'mongodb';
import type { StepCall } from './validate.js';

/** What an Act did: applied (recorded with its detail and data) or refused (recorded, replayed). */
export type ActOutcome =
  | { outcome: 'applied'; detail: string; data: unknown }
  | { outcome: 'refused'; reasonCode: string; detail: string };

/** What a Compensate of an applied Act did. */
export type CompensateOutcome = { effect: 'undone'; detail: string } | { effect: 'nothing_to_undo'; detail: string };

/**
 * The step was applied. `detail` (for people: a shipment id, a balance) is
 * recorded and replayed to every repeat; `data` (any BSON-serialisable value,
 * e.g. `{ shipmentId }`) is recorded with it and handed to `compensate`.
 */
export function applied(detail = '', data: unknown = null): ActOutcome {
  return { outcome: 'applied', detail, data };
}

/**
 * A business refusal: `reasonCode` machine-readable and stable across
 * versions (`A-Z 0-9 _`, e.g. `UNSHIPPABLE`), `detail` for people. It is
 * recorded and replayed; nothing the handler wrote in its transaction is
 * kept (the transaction is rolled back and the refusal recorded on its own).
 */
export function refused(reasonCode: string, detail = ''): ActOutcome {
  return { outcome: 'refused', reasonCode, detail };
}

/** The applied Act is undone. */
export function undone(detail = ''): CompensateOutcome {
  return { effect: 'undone', detail };
}

/** The applied Act left nothing to undo (its effect was already gone). */
export function nothingToUndo(detail = ''): CompensateOutcome {
  return { effect: 'nothing_to_undo', detail };
}

/** What `act` is told besides the call. */
export interface ActContext {
  /** The participant's database. */
  db: Db;
  /** When the call must be answered, ms since the epoch (Infinity: no deadline). */
  deadline: number;
}

/** What `compensate` is told besides the call: the act it undoes, as recorded. */
export interface CompensateContext extends ActContext {
  act: { detail: string; data: unknown; recordedAt: Date };
}

/** Whom or what a call concerns, and how much, as ListOperations shows its records. */
export interface Listing {
  subject: string;
  /** An integer (cents, units), as a decimal string or a number. */
  amount: string | number | bigint;
}

/** A step's business rules. */
export interface StepHandlers {
  /** Does the step in `session`'s transaction, or refuses it. Throwing rolls it all back. */
  act(call: StepCall, session: ClientSession, context: ActContext): Promise<ActOutcome>;
  /** Undoes an applied act in `session`'s transaction. Throwing rolls it all back (the orchestrator retries). */
  compensate(call: StepCall, session: ClientSession, context: CompensateContext): Promise<CompensateOutcome>;
  /**
   * Optional: called when a Compensate arrives before (or instead of) its Act
   * — the null compensation — in the transaction that records it and blocks
   * the Act. For a step whose Act has an external side effect recorded as an
   * intent before the call (examples/media-upload): an Act that crashed
   * between its external call and its commit left the intent, never its
   * record, so its compensation arrives as a null compensation and must
   * still undo what the intent names. Throwing rolls it all back (nothing is
   * recorded; the orchestrator retries the Compensate).
   */
  compensateUnapplied?(call: StepCall, session: ClientSession, context: ActContext): Promise<void>;
  /** Run once at start-up, after the history's indexes and before serving: the step's own indexes, seeds. */
  setup?(db: Db): Promise<void>;
  /** What ListOperations shows for a call's records; by default the customer and the order's total. */
  listing?(call: StepCall): Listing;
}

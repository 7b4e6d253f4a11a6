/**
 * The operationHistory's records: one per `(request_id, kind)`, `kind` being
 * `act` or `compensate`, each carrying the call's parameters (their
 * fingerprint, and the fields themselves to name the one that differs) and
 * the outcome a repeat replays. The unique index on `(request_id, kind)`
 * decides which of two concurrent calls wins (barrier.ts); nothing here reads
 * before writing.
 */
import { createHash } from 'node:crypto';
import type { StepCall } from './validate.js';

export type Kind = 'act' | 'compensate';

/** What a record says happened (the words of participant.v1.Operation.status). */
export type RecordStatus = 'applied' | 'refused' | 'blocked' | 'undone' | 'null_compensation' | 'nothing_to_undo';

/** A call's parameters: everything a repeat of its request id must match (`attempt` is not one). */
export interface Params {
  saga_id: string;
  step: string;
  order: StepCall['order'];
}

/** One document of the history collection. */
export interface OperationRecord {
  request_id: string;
  kind: Kind;
  status: RecordStatus;
  /** sha-256 of the parameters: what a repeat is compared by. */
  fingerprint: string;
  /** The parameters themselves, to name what differs. */
  params: Params;
  /** A refusal's machine-readable reason (empty otherwise). */
  reason_code: string;
  /** For people: what was done, or why it was refused. */
  detail: string;
  /** What an applied act kept for its compensation (the handler's `applied(detail, data)`); null otherwise. */
  data: unknown;
  /** Whom or what the call concerns, for ListOperations. */
  subject: string;
  /** A magnitude for ListOperations (int64 as a decimal string). */
  amount: string;
  recorded_at: Date;
  /** The TTL index removes the record after this. */
  expire_at: Date;
}

export function paramsOf(call: StepCall): Params {
  return { saga_id: call.saga_id, step: call.step, order: call.order };
}

/** The digest of the parameters, field by field in a fixed order. */
export function fingerprint(params: Params): string {
  return createHash('sha256').update(JSON.stringify(fieldsOf(params))).digest('hex');
}

/** The parameters as `[field, value]` pairs, named as the wire names them. */
function fieldsOf(params: Params): [string, string][] {
  const pairs: [string, string][] = [
    ['saga_id', params.saga_id],
    ['step', params.step],
    ['order.order_id', params.order.order_id],
    ['order.customer_id', params.order.customer_id],
    ['order.lines', `${params.order.lines.length} lines`],
  ];
  params.order.lines.forEach((line, i) => {
    pairs.push([`order.lines[${i}].product_id`, line.product_id]);
    pairs.push([`order.lines[${i}].quantity`, line.quantity]);
    pairs.push([`order.lines[${i}].unit_price_cents`, line.unit_price_cents]);
  });
  pairs.push(['order.total_cents', params.order.total_cents]);
  return pairs;
}

/**
 * The first parameter that differs (in the order saga_id, step, order id,
 * customer, line count, each line, total), and
 * `field: <recorded> recorded, <received> received`.
 */
export function difference(recorded: Params, received: Params): { field: string | undefined; text: string } {
  const other = new Map(fieldsOf(received));
  for (const [field, value] of fieldsOf(recorded)) {
    const got = other.get(field);
    if (got !== undefined && got !== value) {
      return { field, text: `${field}: ${JSON.stringify(value)} recorded, ${JSON.stringify(got)} received` };
    }
  }
  return { field: undefined, text: 'parameters differ' };
}

/** A fresh record of `kind` for a call, kept for `retentionSeconds`. */
export function newRecord(
  call: StepCall,
  kind: Kind,
  status: RecordStatus,
  retentionSeconds: number,
  listing: { subject: string; amount: string },
  extra: Partial<Pick<OperationRecord, 'reason_code' | 'detail' | 'data'>> = {},
): OperationRecord {
  const now = new Date();
  const params = paramsOf(call);
  return {
    request_id: call.request_id,
    kind,
    status,
    fingerprint: fingerprint(params),
    params,
    reason_code: extra.reason_code ?? '',
    detail: extra.detail ?? '',
    data: extra.data ?? null,
    subject: listing.subject,
    amount: listing.amount,
    recorded_at: now,
    expire_at: new Date(now.getTime() + retentionSeconds * 1000),
  };
}

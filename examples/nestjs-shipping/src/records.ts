/**
 * The operationHistory's records: one per `(request_id, kind)`, `kind` being
 * `act` or `compensate`, each carrying the call's parameters so a repeat with
 * other parameters is refused naming the field that differs, and the outcome a
 * repeat replays. The unique index on `(request_id, kind)` is what decides
 * which of two concurrent calls wins (barrier.ts); nothing here reads before
 * writing.
 */
import { createHash } from 'node:crypto';
import type { Params } from './validate.js';

export type Kind = 'act' | 'compensate';

/** What a record says happened (the words of participant.v1.Operation.status). */
export type RecordStatus =
  | 'applied'
  | 'refused'
  | 'blocked'
  | 'undone'
  | 'null_compensation'
  | 'nothing_to_undo';

/** One document of the `operation_history` collection. */
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
  /** For people: the shipment id, or why it was refused. */
  detail: string;
  /** The shipment an applied act created (what its compensation cancels). */
  shipment_id: string | null;
  /** Units the record concerns (the order's total quantity). */
  amount: number;
  recorded_at: Date;
  /** The TTL index removes the record after this. */
  expire_at: Date;
}

export function fingerprint(params: Params): string {
  const canonical = JSON.stringify([
    params.saga_id,
    params.step,
    params.order.order_id,
    params.order.customer_id,
    params.order.lines.map((l) => [l.product_id, l.quantity, l.unit_price_cents]),
    params.order.total_cents,
  ]);
  return createHash('sha256').update(canonical).digest('hex');
}

/** The first parameter that differs, as `field: <recorded> recorded, <received> received`. */
export function difference(recorded: Params, received: Params): string {
  const pairs: [string, string, string][] = [
    ['saga_id', recorded.saga_id, received.saga_id],
    ['step', recorded.step, received.step],
    ['order.order_id', recorded.order.order_id, received.order.order_id],
    ['order.customer_id', recorded.order.customer_id, received.order.customer_id],
    ['order.lines', `${recorded.order.lines.length} lines`, `${received.order.lines.length} lines`],
  ];
  recorded.order.lines.forEach((line, i) => {
    const other = received.order.lines[i];
    if (!other) return;
    pairs.push([`order.lines[${i}].product_id`, line.product_id, other.product_id]);
    pairs.push([`order.lines[${i}].quantity`, line.quantity, other.quantity]);
    pairs.push([`order.lines[${i}].unit_price_cents`, line.unit_price_cents, other.unit_price_cents]);
  });
  pairs.push(['order.total_cents', recorded.order.total_cents, received.order.total_cents]);
  const first = pairs.find(([, a, b]) => a !== b);
  if (!first) return 'parameters differ';
  const [field, a, b] = first;
  return `${field}: ${JSON.stringify(a)} recorded, ${JSON.stringify(b)} received`;
}

/** A fresh record of `kind` for a call, kept for `retentionSeconds`. */
export function newRecord(
  requestId: string,
  params: Params,
  kind: Kind,
  status: RecordStatus,
  retentionSeconds: number,
  extra: Partial<Pick<OperationRecord, 'reason_code' | 'detail' | 'shipment_id'>> = {},
): OperationRecord {
  const now = new Date();
  return {
    request_id: requestId,
    kind,
    status,
    fingerprint: fingerprint(params),
    params,
    reason_code: extra.reason_code ?? '',
    detail: extra.detail ?? '',
    shipment_id: extra.shipment_id ?? null,
    amount: params.order.lines.reduce((sum, line) => sum + Number(line.quantity), 0),
    recorded_at: now,
    expire_at: new Date(now.getTime() + retentionSeconds * 1000),
  };
}

/**
 * The participant.v1 messages as the proto loader hands them over (see
 * `loaderOptions` in proto.ts: snake_case names, int64 as strings, enums by
 * name), so the handlers are typed against the contract rather than `any`.
 */

export interface OrderLine {
  product_id: string;
  quantity: string;
  unit_price_cents: string;
}

export interface Order {
  order_id: string;
  customer_id: string;
  lines: OrderLine[];
  total_cents: string;
}

export interface StepCall {
  request_id: string;
  saga_id: string;
  step: string;
  attempt: number;
  /** Absent when the caller did not send one (proto3 message fields are optional). */
  order: Order | null;
}

export type Outcome = 'OUTCOME_UNSPECIFIED' | 'OUTCOME_APPLIED' | 'OUTCOME_REFUSED';

export interface ActReply {
  outcome: Outcome;
  reason_code: string;
  detail: string;
  replayed: boolean;
}

export type CompensationEffect =
  | 'COMPENSATION_EFFECT_UNSPECIFIED'
  | 'COMPENSATION_EFFECT_UNDONE'
  | 'COMPENSATION_EFFECT_NULL_COMPENSATION'
  | 'COMPENSATION_EFFECT_NOTHING_TO_UNDO';

export interface CompensateReply {
  effect: CompensationEffect;
  detail: string;
  replayed: boolean;
}

export interface Timestamp {
  seconds: string;
  nanos: number;
}

export interface Operation {
  request_id: string;
  kind: string;
  status: string;
  amount: string;
  detail: string;
  recorded_at: Timestamp;
  subject: string;
}

export interface ListOperationsRequest {
  request_id: string;
}

export interface ListOperationsResponse {
  operations: Operation[];
}

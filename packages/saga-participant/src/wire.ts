/**
 * The participant.v1 messages as `@grpc/proto-loader` hands them over with
 * this package's loader options (proto.ts): field names as in the .proto
 * (snake_case), int64 as decimal strings (no precision lost on money), enums
 * by name, every field present with its default.
 */

export interface OrderLine {
  product_id: string;
  /** int64, as a decimal string. */
  quantity: string;
  /** int64, as a decimal string. */
  unit_price_cents: string;
}

export interface Order {
  order_id: string;
  customer_id: string;
  /** In order: a line's position is its stable index. */
  lines: OrderLine[];
  /** int64, as a decimal string. */
  total_cents: string;
}

/** A StepCall as received; `order` is null when the caller sent none. */
export interface WireStepCall {
  request_id: string;
  saga_id: string;
  step: string;
  attempt: number;
  order: Order | null;
}

export interface BatchedStepCall {
  call: WireStepCall | null;
  traceparent: string;
}

export interface StepCallBatch {
  calls: BatchedStepCall[];
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

/** How one call of a batch failed: what it would have failed with alone. */
export interface CallError {
  /** A google.rpc.Code value. */
  code: number;
  message: string;
  /** The encoded google.rpc.Status (empty when the failure has no details). */
  details: Buffer;
}

export interface ActResult {
  request_id: string;
  reply?: ActReply;
  error?: CallError;
  result?: 'reply' | 'error';
}

export interface CompensateResult {
  request_id: string;
  reply?: CompensateReply;
  error?: CallError;
  result?: 'reply' | 'error';
}

export interface ActBatchReply {
  results: ActResult[];
}

export interface CompensateBatchReply {
  results: CompensateResult[];
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
  line_index?: number | null;
  subject: string;
}

export interface ListOperationsRequest {
  request_id: string;
}

export interface ListOperationsResponse {
  operations: Operation[];
}

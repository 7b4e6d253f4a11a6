/**
 * Checks a StepCall at the edge, before anything is read or stored: a call
 * that fails here gets INVALID_ARGUMENT naming the field and is never
 * recorded (it can never succeed, and the orchestrator reads the code as a
 * refusal). What passes is the call's parameters, the part a repeat of the
 * request id must match exactly (`attempt` is not one of them).
 */
import { InvalidArgument } from './errors.js';
import type { StepCall } from './wire.js';

/** At most 128 bytes, as the protocol's request id format guarantees. */
export const MAX_ID_BYTES = 128;

/** A StepCall's parameters: what its request id stands for. */
export interface Params {
  saga_id: string;
  step: string;
  order: {
    order_id: string;
    customer_id: string;
    lines: { product_id: string; quantity: string; unit_price_cents: string }[];
    total_cents: string;
  };
}

/** A checked call: its idempotency key, its parameters, and the attempt (for logs only). */
export interface CheckedCall {
  requestId: string;
  attempt: number;
  params: Params;
}

export function checkStepCall(call: StepCall): CheckedCall {
  id('request_id', call.request_id);
  id('saga_id', call.saga_id);
  id('step', call.step);
  const order = call.order;
  if (!order) throw new InvalidArgument('order', 'must be set');
  if (order.order_id.length > 0) id('order.order_id', order.order_id);
  if (order.customer_id.length > 0) id('order.customer_id', order.customer_id);
  if (order.lines.length === 0) throw new InvalidArgument('order.lines', 'must not be empty');
  order.lines.forEach((line, i) => {
    id(`order.lines[${i}].product_id`, line.product_id);
    if (BigInt(line.quantity) <= 0n) {
      throw new InvalidArgument(`order.lines[${i}].quantity`, `must be positive (got ${line.quantity})`);
    }
  });
  return {
    requestId: call.request_id,
    attempt: call.attempt,
    params: {
      saga_id: call.saga_id,
      step: call.step,
      order: {
        order_id: order.order_id,
        customer_id: order.customer_id,
        lines: order.lines.map((line) => ({
          product_id: line.product_id,
          quantity: line.quantity,
          unit_price_cents: line.unit_price_cents,
        })),
        total_cents: order.total_cents,
      },
    },
  };
}

/** A request id for ListOperations: the same rule as in a StepCall. */
export function checkRequestId(requestId: string): string {
  id('request_id', requestId);
  return requestId;
}

function id(field: string, value: string): void {
  if (value.length === 0) throw new InvalidArgument(field, 'must not be empty');
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > MAX_ID_BYTES) {
    throw new InvalidArgument(field, `must be at most ${MAX_ID_BYTES} bytes (got ${bytes})`);
  }
  if (/[\u0000-\u001f\u007f]/.test(value)) {
    throw new InvalidArgument(field, 'must not contain control characters');
  }
}

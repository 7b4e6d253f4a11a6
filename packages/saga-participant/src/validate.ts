/**
 * Checks a StepCall at the edge, before anything is read or stored: a call
 * that fails here gets INVALID_ARGUMENT naming the field (with a
 * google.rpc.BadRequest) and is never recorded (it can never succeed, and
 * the orchestrator reads the code as a refusal). Required: `request_id`,
 * `saga_id`, `step`, and an order with at least one line whose products are
 * named and quantities positive — what the contract's examples require; a
 * team's handler may check more and throw `InvalidArgument` itself.
 */
import { InvalidArgument } from './errors.js';
import type { Order, WireStepCall } from './wire.js';

/** At most 128 bytes, as the protocol's request id format guarantees. */
export const MAX_ID_BYTES = 128;

/** A checked call: the wire StepCall with its order present. */
export interface StepCall extends WireStepCall {
  order: Order;
}

/** The checked call (a copy holding only the contract's fields), or `InvalidArgument`. */
export function checkStepCall(call: WireStepCall): StepCall {
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
    if (BigInt(line.unit_price_cents) < 0n) {
      throw new InvalidArgument(`order.lines[${i}].unit_price_cents`, `must not be negative (got ${line.unit_price_cents})`);
    }
  });
  return {
    request_id: call.request_id,
    saga_id: call.saga_id,
    step: call.step,
    attempt: call.attempt,
    order: {
      order_id: order.order_id,
      customer_id: order.customer_id,
      lines: order.lines.map((line) => ({
        product_id: line.product_id,
        quantity: String(line.quantity),
        unit_price_cents: String(line.unit_price_cents),
      })),
      total_cents: String(order.total_cents),
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

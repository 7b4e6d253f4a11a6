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

/**
 * The invisible format characters (Unicode Cf, as of Unicode 15) an id may
 * not hold, as inclusive code point ranges: the same table as the Rust
 * services' `service_kit::validate::INVISIBLE_FORMAT`.
 */
export const INVISIBLE_FORMAT: readonly (readonly [number, number])[] = [
  [0x00AD, 0x00AD],
  [0x0600, 0x0605],
  [0x061C, 0x061C],
  [0x06DD, 0x06DD],
  [0x070F, 0x070F],
  [0x0890, 0x0891],
  [0x08E2, 0x08E2],
  [0x180E, 0x180E],
  [0x200B, 0x200F],
  [0x202A, 0x202E],
  [0x2060, 0x2064],
  [0x2066, 0x206F],
  [0xFEFF, 0xFEFF],
  [0xFFF9, 0xFFFB],
  [0x110BD, 0x110BD],
  [0x110CD, 0x110CD],
  [0x13430, 0x1343F],
  [0x1BCA0, 0x1BCA3],
  [0x1D173, 0x1D17A],
  [0xE0001, 0xE0001],
  [0xE0020, 0xE007F],
];

const isControl = (c: number) => c <= 0x1f || (c >= 0x7f && c <= 0x9f);
const isInvisibleFormat = (c: number) => INVISIBLE_FORMAT.some(([first, last]) => c >= first && c <= last);
const WHITE_SPACE = /^\p{White_Space}$/u;
const isWhitespace = (c: number) => WHITE_SPACE.test(String.fromCodePoint(c));

/**
 * The project's one identifier rule (docs/operations.md, "Identifiers"),
 * as the Rust services apply it: 1 to 128 bytes of UTF-8, no control
 * characters, no invisible format characters, no leading or trailing
 * whitespace (so not only whitespace). Refused, never trimmed; the problem
 * names the first offending character by code point and byte offset.
 */
export function idProblem(value: string): string | undefined {
  if (value.length === 0) return 'must not be empty';
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > MAX_ID_BYTES) return `must be at most ${MAX_ID_BYTES} bytes (got ${bytes})`;
  const points = [...value].map((ch) => ch.codePointAt(0)!);
  const at = (index: number) => Buffer.byteLength(String.fromCodePoint(...points.slice(0, index)), 'utf8');
  const hex = (c: number) => `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
  const control = points.findIndex(isControl);
  if (control >= 0) return `must not contain control characters (${hex(points[control]!)} at byte ${at(control)})`;
  const format = points.findIndex(isInvisibleFormat);
  if (format >= 0) return `must not contain invisible format characters (${hex(points[format]!)} at byte ${at(format)})`;
  if (points.every(isWhitespace)) return 'must not be only whitespace';
  if (isWhitespace(points[0]!)) return `must not start with whitespace (${hex(points[0]!)}); ids are refused, not trimmed`;
  const last = points[points.length - 1]!;
  if (isWhitespace(last)) return `must not end with whitespace (${hex(last)}); ids are refused, not trimmed`;
  return undefined;
}

function id(field: string, value: string): void {
  const problem = idProblem(value);
  if (problem !== undefined) throw new InvalidArgument(field, problem);
}

/**
 * The step's business: shipping an order. Every function takes the
 * transaction's session, because each effect is written in the same
 * transaction as the operationHistory record that guards it (barrier.ts);
 * nothing here knows about request ids being repeated.
 */
import { randomUUID } from 'node:crypto';
import type { ClientSession } from 'mongodb';
import type { Store } from './db.js';
import type { Params } from './validate.js';

/** The first product of the order marked unshippable, if any. */
export async function firstUnshippable(store: Store, params: Params, session: ClientSession): Promise<string | null> {
  const products = [...new Set(params.order.lines.map((line) => line.product_id))];
  const rules = await store.rules.find({ _id: { $in: products }, unshippable: true }, { session }).toArray();
  const blocked = new Set(rules.map((rule) => rule._id));
  return products.find((product) => blocked.has(product)) ?? null;
}

/** A fresh shipment id. */
export function newShipmentId(): string {
  return `shp-${randomUUID()}`;
}

/** Creates the order's shipment under `id`. */
export async function createShipment(
  store: Store,
  id: string,
  requestId: string,
  params: Params,
  session: ClientSession,
): Promise<void> {
  await store.shipments.insertOne(
    {
      _id: id,
      request_id: requestId,
      saga_id: params.saga_id,
      order_id: params.order.order_id,
      customer_id: params.order.customer_id,
      lines: params.order.lines.map((line) => ({ product_id: line.product_id, quantity: line.quantity })),
      status: 'created',
      created_at: new Date(),
      cancelled_at: null,
    },
    { session },
  );
}

/** Cancels a created shipment; false when there is no such shipment still created. */
export async function cancelShipment(store: Store, shipmentId: string, session: ClientSession): Promise<boolean> {
  const result = await store.shipments.updateOne(
    { _id: shipmentId, status: 'created' },
    { $set: { status: 'cancelled', cancelled_at: new Date() } },
    { session },
  );
  return result.matchedCount === 1;
}

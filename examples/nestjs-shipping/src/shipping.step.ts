/**
 * The shipping step's business rules, and nothing else: Act creates one
 * shipment for the order, or refuses an order with a product marked
 * unshippable (`UNSHIPPABLE`); Compensate cancels the shipment.
 *
 * `@saga/participant` calls `act` at most once per request id, inside the
 * MongoDB transaction that writes the operationHistory record guarding it
 * (so every read and write here passes `{ session }`), and `compensate` at
 * most once, only for an applied act. Retries, duplicates, late and
 * reordered calls, other parameters under a known request id, batches, the
 * token, deadlines and error details are the package's (its README).
 *
 * Collections (database `MONGODB_DATABASE`, beside the package's
 * `operation_history`):
 * - `shipments`: one document per applied Act, `_id` `shp-<uuid>`. It has
 *   deliberately no unique index of its own: that an order ships once is the
 *   barrier's job, and the tests count these documents to prove it.
 * - `shipping_rules`: `{_id: product_id, unshippable: true}`, seeded from
 *   `UNSHIPPABLE_PRODUCTS` at start-up; a rule inserted while the service runs
 *   applies to the next order.
 */
import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { ClientSession, Db } from 'mongodb';
import {
  Corrupt,
  applied,
  refused,
  undone,
  type ActOutcome,
  type CompensateContext,
  type CompensateOutcome,
  type Listing,
  type StepCall,
  type StepHandlers,
} from '@saga/participant';
import { InjectSagaDb } from '@saga/participant/nest';

/** The refusal's reason code (stable: the orchestrator reports it as the saga's `refusal_code`). */
export const UNSHIPPABLE = 'UNSHIPPABLE';

/** The injection token of the products seeded unshippable at start-up. */
export const UNSHIPPABLE_PRODUCTS = Symbol('UNSHIPPABLE_PRODUCTS');

export interface Shipment {
  _id: string;
  request_id: string;
  saga_id: string;
  order_id: string;
  customer_id: string;
  lines: { product_id: string; quantity: string }[];
  status: 'created' | 'cancelled';
  created_at: Date;
  cancelled_at: Date | null;
}

export interface ShippingRule {
  _id: string;
  unshippable: boolean;
}

/** What an applied Act keeps for its compensation. */
interface Shipped {
  shipment_id: string;
}

@Injectable()
export class ShippingStep implements StepHandlers {
  constructor(
    @InjectSagaDb() private readonly db: Db,
    @Inject(UNSHIPPABLE_PRODUCTS) private readonly unshippable: string[],
  ) {}

  private get shipments() {
    return this.db.collection<Shipment>('shipments');
  }

  private get rules() {
    return this.db.collection<ShippingRule>('shipping_rules');
  }

  /** Marks the configured products unshippable (an upsert by product id: restarts are idempotent). */
  async setup(): Promise<void> {
    for (const product of this.unshippable) {
      await this.rules.updateOne({ _id: product }, { $set: { unshippable: true } }, { upsert: true });
    }
  }

  async act(call: StepCall, session: ClientSession): Promise<ActOutcome> {
    const products = [...new Set(call.order.lines.map((line) => line.product_id))];
    const blocked = await this.rules.find({ _id: { $in: products }, unshippable: true }, { session }).toArray();
    const product = products.find((p) => blocked.some((rule) => rule._id === p));
    if (product !== undefined) return refused(UNSHIPPABLE, `product ${product} cannot be shipped`);

    const shipment_id = `shp-${randomUUID()}`;
    await this.shipments.insertOne(
      {
        _id: shipment_id,
        request_id: call.request_id,
        saga_id: call.saga_id,
        order_id: call.order.order_id,
        customer_id: call.order.customer_id,
        lines: call.order.lines.map((line) => ({ product_id: line.product_id, quantity: line.quantity })),
        status: 'created',
        created_at: new Date(),
        cancelled_at: null,
      },
      { session },
    );
    return applied(`shipment ${shipment_id}`, { shipment_id } satisfies Shipped);
  }

  async compensate(call: StepCall, session: ClientSession, { act }: CompensateContext): Promise<CompensateOutcome> {
    const { shipment_id } = act.data as Shipped;
    const cancelled = await this.shipments.updateOne(
      { _id: shipment_id, status: 'created' },
      { $set: { status: 'cancelled', cancelled_at: new Date() } },
      { session },
    );
    if (cancelled.matchedCount !== 1) {
      throw new Corrupt(`request_id ${JSON.stringify(call.request_id)}: shipment ${shipment_id} of an applied act is not a created shipment`);
    }
    return undone(`shipment ${shipment_id} cancelled`);
  }

  /** ListOperations shows the order and the units shipped. */
  listing(call: StepCall): Listing {
    return { subject: call.order.order_id, amount: call.order.lines.reduce((sum, line) => sum + BigInt(line.quantity), 0n) };
  }
}

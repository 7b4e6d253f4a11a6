/**
 * The MongoDB side: the connection, the three collections and their indexes,
 * and the unshippable products seeded at start-up.
 *
 * - `operation_history`: the barrier's records; the unique index on
 *   `(request_id, kind)` is the whole dedupe mechanism, the TTL index on
 *   `expire_at` the retention.
 * - `shipments`: the effect. Deliberately no unique index of its own: that
 *   each order is shipped once is the barrier's job, and the tests count these
 *   documents to prove it.
 * - `shipping_rules`: `{_id: product_id, unshippable: true}`.
 */
import { MongoClient, type Collection, type Db } from 'mongodb';
import type { Config } from './config.js';
import type { OperationRecord } from './records.js';

/**
 * How long an operation waits for a server before failing: short, so that a
 * call while MongoDB is down answers UNAVAILABLE well within the
 * orchestrator's call timeout (5 s by default) instead of timing out.
 */
export const SERVER_SELECTION_TIMEOUT_MS = 1000;

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

export interface Store {
  client: MongoClient;
  db: Db;
  history: Collection<OperationRecord>;
  shipments: Collection<Shipment>;
  rules: Collection<ShippingRule>;
}

export async function openStore(config: Config): Promise<Store> {
  const client = new MongoClient(config.mongodbUri, {
    appName: 'nestjs-shipping',
    serverSelectionTimeoutMS: SERVER_SELECTION_TIMEOUT_MS,
  });
  try {
    await client.connect();
    const db = client.db(config.mongodbDatabase);
    const store: Store = {
      client,
      db,
      history: db.collection<OperationRecord>('operation_history'),
      shipments: db.collection<Shipment>('shipments'),
      rules: db.collection<ShippingRule>('shipping_rules'),
    };
    await store.history.createIndex({ request_id: 1, kind: 1 }, { unique: true, name: 'request_id_kind' });
    await store.history.createIndex({ expire_at: 1 }, { expireAfterSeconds: 0, name: 'expire_at_ttl' });
    await seedRules(store, config.unshippableProducts);
    return store;
  } catch (error) {
    await client.close();
    throw error;
  }
}

/** Marks each product unshippable (idempotent: upserts by product id). */
async function seedRules(store: Store, products: string[]): Promise<void> {
  for (const product of products) {
    await store.rules.updateOne({ _id: product }, { $set: { unshippable: true } }, { upsert: true });
  }
}

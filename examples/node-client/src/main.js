#!/usr/bin/env node
/**
 * `saga-order`: places one order and follows its saga to the end.
 *
 *   node src/main.js [--addr HOST:PORT] [--customer alice] [--item sku-apple:2:150 ...]
 *                    [--request-id ID] [--no-wait]
 *
 * The address comes from --addr, else ORCHESTRATOR_ADDR, else 127.0.0.1:50051;
 * CLIENT_TOKEN, when set, is sent as `authorization: Bearer <token>`.
 * Exit code: 0 once the saga is COMPLETED or CANCELLED, 1 FAILED or another
 * error, 2 invalid order (the field is printed), 3 request id reused for a
 * different order, 4 the orchestrator stayed unavailable through every retry.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { connect, createOrder, explain, orchestratorAddr, stepSummary, watchSaga } from './saga-client.js';

const EXIT = { invalid: 2, reused: 3, unavailable: 4 };

async function main() {
  const { values } = parseArgs({
    options: {
      addr: { type: 'string' },
      customer: { type: 'string', default: 'alice' },
      item: { type: 'string', multiple: true, default: ['sku-apple:1:150'] },
      'request-id': { type: 'string' },
      'no-wait': { type: 'boolean', default: false },
    },
  });
  const addr = orchestratorAddr(values.addr);
  const request = {
    request_id: values['request-id'] ?? `node-client-${randomUUID()}`,
    customer_id: values.customer,
    items: values.item.map(parseItem),
    wait: !values['no-wait'],
  };
  const client = connect(addr);
  try {
    console.log(`CreateOrder ${request.request_id} for ${request.customer_id} at ${addr}`);
    const placed = await createOrder(client, request, {
      onRetry: (error, attempt, delay) =>
        console.log(`  attempt ${attempt}: ${explain(error).line}; again in ${delay} ms with the same request_id`),
    });
    console.log(`saga ${placed.saga_id} (${placed.created ? 'created' : 'already existed'}): ${placed.status}`);
    const final = await watchSaga(client, placed.saga_id, (saga) =>
      console.log(`  ${saga.status}  [${stepSummary(saga)}]`),
    );
    console.log(`final: ${final.status}${final.reason ? ` (${final.reason})` : ''}`);
    return final.status === 'SAGA_STATUS_FAILED' ? 1 : 0;
  } catch (error) {
    if (typeof error.code !== 'number') throw error;
    const { kind, line } = explain(error);
    console.error(line);
    return EXIT[kind] ?? 1;
  } finally {
    client.close();
  }
}

/** `product:quantity:unit_price_cents` → an OrderItem (int64 as strings). */
function parseItem(text) {
  const [product_id, quantity, unit_price_cents, extra] = text.split(':');
  if (!product_id || !quantity || !unit_price_cents || extra !== undefined) {
    throw new Error(`--item ${text}: expected product:quantity:unit_price_cents`);
  }
  return { product_id, quantity, unit_price_cents };
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`saga-order: ${error.message}`);
    process.exit(1);
  },
);

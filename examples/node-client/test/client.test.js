/**
 * The client against a live orchestrator (ORCHESTRATOR_ADDR: the dev stack in
 * the project's test command, with its demo customers and stock — alice
 * 1,000,000 cents, bob 1,000; sku-apple 1,000 units), and its retry rule
 * against a stand-in server that fails on purpose.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_DIR, connect, createOrder, errorDetails, explain, watchSaga } from '../src/saga-client.js';

const MAIN = fileURLToPath(new URL('../src/main.js', import.meta.url));

function liveAddr() {
  const addr = process.env.ORCHESTRATOR_ADDR;
  if (!addr) {
    throw new Error('ORCHESTRATOR_ADDR is not set: run against a live orchestrator (scripts/test-examples.sh starts the dev stack)');
  }
  return addr;
}

const order = (customer_id, product_id, quantity, unit_price_cents, extra = {}) => ({
  request_id: `node-client-test-${randomUUID()}`,
  customer_id,
  items: [{ product_id, quantity: String(quantity), unit_price_cents: String(unit_price_cents) }],
  wait: true,
  ...extra,
});

async function failure(promise) {
  try {
    const reply = await promise;
    throw new Error(`expected a failure, got ${JSON.stringify(reply)}`);
  } catch (error) {
    if (typeof error.code !== 'number') throw error;
    return error;
  }
}

describe('against the live orchestrator', () => {
  let client;
  before(() => {
    client = connect(liveAddr());
  });
  after(() => client?.close());

  it('an order that completes: created, COMPLETED, every step succeeded', async () => {
    const placed = await createOrder(client, order('alice', 'sku-apple', 1, 150));
    assert.equal(placed.created, true);
    assert.equal(placed.status, 'SAGA_STATUS_COMPLETED');
    assert.ok(placed.saga.steps.length >= 2);
    assert.ok(placed.saga.steps.every((step) => step.status === 'STEP_STATUS_SUCCEEDED'));
  });

  it('an order that is cancelled: bob cannot pay 5000 cents', async () => {
    const placed = await createOrder(client, order('bob', 'sku-apple', 1, 5000));
    assert.equal(placed.status, 'SAGA_STATUS_CANCELLED');
    assert.notEqual(placed.saga.reason, '');
  });

  it('a duplicate CreateOrder: the same saga, created: false', async () => {
    const request = order('alice', 'sku-apple', 2, 150);
    const first = await createOrder(client, request);
    const again = await createOrder(client, request);
    assert.equal(again.created, false);
    assert.equal(again.saga_id, first.saga_id);
    assert.equal(again.status, first.status);
  });

  it('the same request_id for a different order: ALREADY_EXISTS, read as a reused request id', async () => {
    const request = order('alice', 'sku-apple', 1, 150);
    await createOrder(client, request);
    const error = await failure(createOrder(client, { ...request, customer_id: 'bob' }));
    assert.equal(error.code, grpc.status.ALREADY_EXISTS);
    assert.equal(explain(error).kind, 'reused');
    // Read from the ErrorInfo in the status details, not from the message.
    assert.equal(explain(error).reason, 'REQUEST_ID_REUSED');
    assert.equal(explain(error).field, 'customer_id');
    assert.equal(errorDetails(error).domain, 'saga.v1');
  });

  it('an invalid order: INVALID_ARGUMENT, and the field it names', async () => {
    const error = await failure(createOrder(client, order('alice', 'sku-apple', 0, 150)));
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(explain(error).field, 'items[0].quantity');
    const empty = await failure(createOrder(client, order('', 'sku-apple', 1, 150)));
    assert.equal(explain(empty).field, 'customer_id');
    // Every bad field at once, from the BadRequest.
    const both = await failure(createOrder(client, order('', 'sku-apple', 0, 150)));
    assert.deepEqual(explain(both).fields, ['customer_id', 'items[0].quantity']);
  });

  it('WatchSaga followed to its end: every state in order, ending terminal', async () => {
    const placed = await createOrder(client, order('alice', 'sku-apple', 1, 150, { wait: false }));
    const seen = [];
    const final = await watchSaga(client, placed.saga_id, (saga) => seen.push(saga.status));
    assert.equal(final.status, 'SAGA_STATUS_COMPLETED');
    assert.equal(seen.at(-1), 'SAGA_STATUS_COMPLETED');
    assert.ok(seen.slice(0, -1).every((s) => s === 'SAGA_STATUS_RUNNING'), seen.join(' '));
    const sagaTransitions = final.history.filter((t) => t.step === '').map((t) => t.to);
    assert.equal(sagaTransitions.at(-1), 'completed', sagaTransitions.join(' '));
  });

  it('the command line: prints each status and the final one; an invalid order exits 2 naming the field', async () => {
    const ok = await run(['--addr', liveAddr(), '--customer', 'alice', '--item', 'sku-apple:1:150']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /final: SAGA_STATUS_COMPLETED/);
    const bad = await run(['--addr', liveAddr(), '--item', 'sku-apple:-1:150']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^invalid items\[0\]\.quantity: /m);
  });
});

describe('retries', () => {
  let server;
  let port;
  const seen = [];
  let failuresLeft = 0;

  before(async () => {
    const definition = protoLoader.loadSync('saga/v1/saga.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
    const saga = grpc.loadPackageDefinition(definition).saga.v1;
    server = new grpc.Server();
    server.addService(saga.OrderService.service, {
      CreateOrder(call, callback) {
        seen.push(call.request.request_id);
        if (call.request.customer_id === 'invalid') {
          return callback({ code: grpc.status.INVALID_ARGUMENT, details: 'customer_id: must not be empty' });
        }
        if (failuresLeft > 0) {
          failuresLeft -= 1;
          return callback({ code: grpc.status.UNAVAILABLE, details: 'stand-in outage' });
        }
        callback(null, { saga_id: 'saga-1', order_id: 'order-saga-1', status: 'SAGA_STATUS_COMPLETED', created: seen.length === 1 });
      },
    });
    port = await new Promise((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
  });
  after(() => server?.forceShutdown());

  it('UNAVAILABLE is retried with the same request_id until it answers', async () => {
    seen.length = 0;
    failuresLeft = 2;
    const client = connect(`127.0.0.1:${port}`);
    const delays = [];
    const placed = await createOrder(client, order('alice', 'sku-apple', 1, 150), {
      minDelayMs: 5,
      onRetry: (_e, _attempt, delay) => delays.push(delay),
    });
    client.close();
    assert.equal(placed.saga_id, 'saga-1');
    assert.equal(seen.length, 3);
    assert.equal(new Set(seen).size, 1, 'every attempt carried the same request_id');
    assert.equal(delays.length, 2);
  });

  it('gives up after its attempts, and never retries a final error', async () => {
    seen.length = 0;
    failuresLeft = 100;
    const client = connect(`127.0.0.1:${port}`);
    const unavailable = await failure(createOrder(client, order('alice', 'sku-apple', 1, 150), { attempts: 3, minDelayMs: 1 }));
    assert.equal(unavailable.code, grpc.status.UNAVAILABLE);
    assert.equal(seen.length, 3);
    seen.length = 0;
    const invalid = await failure(createOrder(client, order('invalid', 'sku-apple', 1, 150)));
    assert.equal(invalid.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(seen.length, 1);
    client.close();
    failuresLeft = 0;
  });
});

function run(args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * A client of the saga orchestrator (saga.v1) in plain Node: @grpc/grpc-js
 * and @grpc/proto-loader over the repository's own saga.proto, nothing
 * generated, nothing copied.
 *
 * What it shows:
 * - `createOrder` with `wait: true` answers once the saga is terminal.
 *   UNAVAILABLE and DEADLINE_EXCEEDED mean "the outcome is unknown": it calls
 *   again with the *same* request_id, with exponential backoff and full
 *   jitter. That is safe because CreateOrder is idempotent by request_id: a
 *   repeat finds the saga the first call created (`created: false`), so a
 *   retry never places a second order.
 * - Every other error is final, and is decided by its status code and its
 *   rich error details (`errorDetails`), never by message text:
 *   INVALID_ARGUMENT (its google.rpc.BadRequest names every bad field,
 *   `items[0].quantity`), ALREADY_EXISTS (ErrorInfo `REQUEST_ID_REUSED`: the
 *   request id was used before for a different order; metadata `field` names
 *   what differs).
 * - `watchSaga` follows a saga's stream to its end: the first message is the
 *   current state, then one per change, and the stream ends after the
 *   terminal state; a dropped stream is reopened (the first message of the
 *   new one is the state again, so nothing is missed).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { errorDetails } from './error-details.js';

export { errorDetails };

/** The repository's proto root; `PROTO_DIR` overrides it for a checkout elsewhere. */
export const PROTO_DIR =
  process.env.PROTO_DIR ?? path.resolve(fileURLToPath(new URL('.', import.meta.url)), '../../../proto/proto');

export const TERMINAL = new Set(['SAGA_STATUS_COMPLETED', 'SAGA_STATUS_CANCELLED', 'SAGA_STATUS_FAILED']);

/** Codes after which the same call may succeed: retried with the same request_id. */
const RETRIABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED]);

export const DEFAULT_ADDR = '127.0.0.1:50051';

/** The orchestrator's address: `--addr`, else `ORCHESTRATOR_ADDR`, else the dev default. */
export function orchestratorAddr(argAddr) {
  return argAddr || process.env.ORCHESTRATOR_ADDR || DEFAULT_ADDR;
}

/** Clients of saga.v1.OrderService and saga.v1.SagaService at `addr` (`host:port`). */
export function connect(addr, { token = process.env.CLIENT_TOKEN } = {}) {
  const definition = protoLoader.loadSync('saga/v1/saga.proto', {
    includeDirs: [PROTO_DIR],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const saga = grpc.loadPackageDefinition(definition).saga.v1;
  const credentials = grpc.credentials.createInsecure();
  return {
    orders: new saga.OrderService(addr, credentials),
    sagas: new saga.SagaService(addr, credentials),
    metadata() {
      const metadata = new grpc.Metadata();
      if (token) metadata.set('authorization', `Bearer ${token}`);
      return metadata;
    },
    close() {
      this.orders.close();
      this.sagas.close();
    },
  };
}

/**
 * CreateOrder, retried with the same request_id while the outcome is unknown.
 * `onRetry(error, attempt, delayMs)` is told before each retry.
 */
export async function createOrder(client, request, options = {}) {
  const { attempts = 6, callTimeoutMs = 35_000, minDelayMs = 100, maxDelayMs = 3_000, onRetry = () => {} } = options;
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await unary(client.orders, 'CreateOrder', request, client.metadata(), callTimeoutMs);
    } catch (error) {
      if (!RETRIABLE.has(error.code) || attempt >= attempts) throw error;
      // Full jitter: a random delay up to an exponentially growing cap.
      const delay = Math.round(Math.random() * Math.min(maxDelayMs, minDelayMs * 2 ** attempt));
      onRetry(error, attempt, delay);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

/**
 * Follows saga `sagaId` until its terminal state; `onState(saga)` gets every
 * message. Resolves to the terminal saga. A stream that fails with a
 * retriable code is reopened, `reconnects` times at most.
 */
export async function watchSaga(client, sagaId, onState = () => {}, { reconnects = 5 } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    try {
      const last = await followStream(client, sagaId, onState);
      if (last && TERMINAL.has(last.status)) return last;
      throw Object.assign(new Error(`the stream of saga ${sagaId} ended before a terminal state`), {
        code: grpc.status.UNAVAILABLE,
      });
    } catch (error) {
      if (!RETRIABLE.has(error.code) || attempt >= reconnects) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt));
    }
  }
}

function followStream(client, sagaId, onState) {
  return new Promise((resolve, reject) => {
    let last = null;
    const stream = client.sagas.WatchSaga({ saga_id: sagaId }, client.metadata());
    stream.on('data', (saga) => {
      last = saga;
      onState(saga);
    });
    stream.on('end', () => resolve(last));
    stream.on('error', reject);
  });
}

/**
 * One line for a failed call, decided by its status code and its rich error
 * details (`errorDetails`: the BadRequest's fields, the ErrorInfo's reason),
 * never by message text.
 */
export function explain(error) {
  const details = errorDetails(error);
  switch (error.code) {
    case grpc.status.INVALID_ARGUMENT: {
      // The BadRequest names every bad field; the message says why, for people.
      const fields = details.fields.length > 0 ? details.fields : ['unknown field'];
      const why = details.violations.map((v) => `${v.field}: ${v.description}`).join('; ');
      return { kind: 'invalid', field: fields[0], fields, line: `invalid ${why || error.details}` };
    }
    case grpc.status.ALREADY_EXISTS:
      return {
        kind: 'reused',
        reason: details.reason,
        field: details.metadata.field ?? null,
        line: `this request_id was already used for a different order: ${error.details}`,
      };
    case grpc.status.UNAVAILABLE:
    case grpc.status.DEADLINE_EXCEEDED:
      return {
        kind: 'unavailable',
        line: `no answer from the orchestrator (${grpc.status[error.code]}: ${error.details})`,
      };
    case grpc.status.UNAUTHENTICATED:
      return {
        kind: 'unauthenticated',
        reason: details.reason,
        line: `not authenticated (${details.reason ?? 'no reason given'}): set CLIENT_TOKEN (${error.details})`,
      };
    default:
      return { kind: 'other', line: `${grpc.status[error.code] ?? 'error'}: ${error.details ?? error.message}` };
  }
}

/** The steps of a saga, one short string: `payment SUCCEEDED, inventory SUCCEEDED`. */
export function stepSummary(saga) {
  return saga.steps.map((step) => `${step.name} ${step.status.replace('STEP_STATUS_', '')}`).join(', ');
}

function unary(service, method, request, metadata, timeoutMs) {
  return new Promise((resolve, reject) => {
    service[method](request, metadata, { deadline: new Date(Date.now() + timeoutMs) }, (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

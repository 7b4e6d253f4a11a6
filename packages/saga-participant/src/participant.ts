/**
 * A running participant: `participant.v1.SagaStepService` (Act, Compensate,
 * ActBatch, CompensateBatch) and `participant.v1.OperationHistoryService`
 * (ListOperations) over `@grpc/grpc-js`, each call through the token check,
 * validation, admission and the barrier, failures answered with their
 * `google.rpc` details.
 *
 *     const participant = await SagaParticipant.start({
 *       mongodbUri, database: 'shipping', listen: '127.0.0.1:50054',
 *       handlers: { act, compensate },
 *     });
 *     console.log(`READY ${participant.port}`);
 *     // ... on SIGTERM:
 *     await participant.close();
 *
 * Batches (docs/participant-protocol.md, "Batches"): the token is checked
 * once for the batch; a batch of more than `maxBatchCalls` calls is refused
 * whole with INVALID_ARGUMENT naming `calls` (and a request over
 * `maxReceiveBytes` with RESOURCE_EXHAUSTED, by gRPC) before any call runs;
 * otherwise every call is exactly the call on its own — validated, admitted,
 * deduplicated by its own request id in its own transaction — and gets its
 * own result, in order: the reply, or the `CallError` (code, message, the
 * encoded google.rpc.Status) it would have failed with alone. Up to
 * `batchConcurrency` calls of one batch run at once; the batch's deadline is
 * every call's.
 */
import * as grpc from '@grpc/grpc-js';
import type { Collection, Db, MongoClient } from 'mongodb';
import { Admission, DEFAULT_MAX_IN_FLIGHT } from './admission.js';
import { TokenPolicy } from './auth.js';
import { Barrier } from './barrier.js';
import {
  DEFAULT_HISTORY_RETENTION_SECONDS,
  DEFAULT_MIN_HISTORY_RETENTION_SECONDS,
  checkRetention,
} from './config.js';
import { InvalidArgument, describe, serviceError, statusOf } from './errors.js';
import { listOperations } from './history.js';
import { jsonLogger, type LogFields, type Logger } from './log.js';
import { DEFAULT_STARTUP_WAIT_MS, connectMongo, ensureHistoryIndexes } from './mongo.js';
import { PROTO_DIR, loadParticipantPackage } from './proto.js';
import type { OperationRecord } from './records.js';
import type { StepHandlers } from './step.js';
import { checkRequestId, checkStepCall, type StepCall } from './validate.js';
import type {
  ActReply,
  BatchedStepCall,
  CallError,
  CompensateReply,
  ListOperationsRequest,
  ListOperationsResponse,
  StepCallBatch,
  WireStepCall,
} from './wire.js';

/** Most calls one batch may carry (INVALID_ARGUMENT naming `calls` past it), as the Rust participants. */
export const DEFAULT_MAX_BATCH_CALLS = 1000;
/** Calls of one batch at work at once (each also goes through admission). */
export const DEFAULT_BATCH_CONCURRENCY = 16;
/** Requests above this are refused by gRPC (RESOURCE_EXHAUSTED) before any handler runs. */
export const DEFAULT_MAX_RECEIVE_BYTES = 1024 * 1024;
/** How long `close` lets the calls in flight finish before cutting them off. */
const SHUTDOWN_GRACE_MS = 10_000;

export interface ParticipantOptions {
  /** The step's two functions (and optional setup and listing). */
  handlers: StepHandlers;
  /** A connected client to use (not closed by `close` unless `ownsClient`); else `mongodbUri`. */
  client?: MongoClient;
  /** The database of `client`; else `database` on it. */
  db?: Db;
  /** Connect here when no `client` is given (waited for up to `startupWaitMs`). */
  mongodbUri?: string;
  /** The database holding the history and the step's own collections. */
  database?: string;
  /** Whether `close` closes the client (true when the participant connected it). */
  ownsClient?: boolean;
  /** The history collection, `operation_history` by default. */
  historyCollection?: string;
  /** How long records are kept (a TTL index removes them after); 7 days by default. */
  historyRetentionSeconds?: number;
  /** Start-up refuses a retention below this; 2790 s (46.5 min) by default. */
  minHistoryRetentionSeconds?: number;
  /** Act, Compensate and the batches need `authorization: Bearer <serviceToken>`; unset: open. */
  serviceToken?: string | undefined;
  /** Also accepted by ListOperations. */
  adminToken?: string | undefined;
  /** Calls at work at once; more wait within their deadline, then UNAVAILABLE. 32 by default. */
  maxInFlight?: number;
  maxBatchCalls?: number;
  batchConcurrency?: number;
  maxReceiveBytes?: number;
  /** How long start-up waits for MongoDB (ms), 30 s by default. */
  startupWaitMs?: number;
  /** Names the service in logs and is the MongoDB appName; `saga-participant` by default. */
  serviceName?: string;
  /** JSON lines on stderr by default. */
  logger?: Logger;
  /** The proto root; the package's own copies by default. */
  protoDir?: string;
}

export class SagaParticipant {
  readonly serviceName: string;
  private readonly options: ParticipantOptions;
  private readonly log: Logger;
  private readonly tokens: TokenPolicy;
  readonly admission: Admission;
  private readonly retentionSeconds: number;
  private client: MongoClient | undefined;
  private database: Db | undefined;
  private historyCollection: Collection<OperationRecord> | undefined;
  private barrierInstance: Barrier | undefined;
  private server: grpc.Server | undefined;
  private boundPort = 0;
  private ownsClient: boolean;

  constructor(options: ParticipantOptions) {
    if (!options.handlers || typeof options.handlers.act !== 'function' || typeof options.handlers.compensate !== 'function') {
      throw new TypeError('handlers: act(call, session) and compensate(call, session) are required');
    }
    this.options = options;
    this.serviceName = options.serviceName ?? 'saga-participant';
    this.log = options.logger ?? jsonLogger(this.serviceName);
    this.retentionSeconds = options.historyRetentionSeconds ?? DEFAULT_HISTORY_RETENTION_SECONDS;
    checkRetention(this.retentionSeconds, options.minHistoryRetentionSeconds ?? DEFAULT_MIN_HISTORY_RETENTION_SECONDS);
    this.tokens = new TokenPolicy(options.serviceToken, options.adminToken);
    this.admission = new Admission(options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.client = options.client;
    this.ownsClient = options.ownsClient ?? options.client === undefined;
    if (!options.client && !options.mongodbUri) throw new TypeError('either client or mongodbUri is required');
  }

  /** Opens (connects, indexes, the step's setup) and serves on `listen` (`127.0.0.1:50054` by default). */
  static async start(options: ParticipantOptions & { listen?: string }): Promise<SagaParticipant> {
    const participant = new SagaParticipant(options);
    try {
      await participant.open();
      await participant.listen(options.listen ?? '127.0.0.1:50054');
    } catch (error) {
      await participant.close();
      throw error;
    }
    return participant;
  }

  /** Connects (unless given a client), creates the history's indexes and runs the step's `setup`. */
  async open(): Promise<void> {
    if (this.barrierInstance) return;
    if (!this.client) {
      this.client = await connectMongo(this.options.mongodbUri!, {
        appName: this.serviceName,
        startupWaitMs: this.options.startupWaitMs ?? DEFAULT_STARTUP_WAIT_MS,
        logger: this.log,
      });
    }
    this.database = this.options.db ?? this.client.db(this.options.database);
    this.historyCollection = this.database.collection<OperationRecord>(this.options.historyCollection ?? 'operation_history');
    await ensureHistoryIndexes(this.historyCollection);
    await this.options.handlers.setup?.(this.database);
    this.barrierInstance = new Barrier({
      client: this.client,
      db: this.database,
      history: this.historyCollection,
      handlers: this.options.handlers,
      retentionSeconds: this.retentionSeconds,
    });
  }

  /** The database (after `open`). */
  get db(): Db {
    if (!this.database) throw new Error('the participant is not open yet');
    return this.database;
  }

  /** The MongoDB client (after `open`). */
  get mongoClient(): MongoClient {
    if (!this.client) throw new Error('the participant is not open yet');
    return this.client;
  }

  /** The history collection (after `open`). */
  get history(): Collection<OperationRecord> {
    if (!this.historyCollection) throw new Error('the participant is not open yet');
    return this.historyCollection;
  }

  /** The barrier (after `open`): Act and Compensate without gRPC, for tests and other transports. */
  get barrier(): Barrier {
    if (!this.barrierInstance) throw new Error('the participant is not open yet');
    return this.barrierInstance;
  }

  /** The port bound by `listen` (0 before). */
  get port(): number {
    return this.boundPort;
  }

  /** Binds a gRPC server with both services on `address` (port 0: a free one); resolves to the port. */
  async listen(address: string): Promise<number> {
    await this.open();
    const server = new grpc.Server({
      'grpc.max_receive_message_length': this.options.maxReceiveBytes ?? DEFAULT_MAX_RECEIVE_BYTES,
    });
    this.addServices(server);
    this.boundPort = await new Promise<number>((resolve, reject) =>
      server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (error, port) =>
        error ? reject(error) : resolve(port),
      ),
    );
    this.server = server;
    this.log('info', 'serving', {
      port: this.boundPort,
      database: this.db.databaseName,
      history_retention_seconds: this.retentionSeconds,
      service_token: this.tokens.serviceTokenRequired,
    });
    return this.boundPort;
  }

  /** Adds both participant.v1 services to a gRPC server of your own. */
  addServices(server: grpc.Server): void {
    const pkg = loadParticipantPackage(this.options.protoDir ?? PROTO_DIR);
    server.addService(pkg.SagaStepService.service, {
      Act: (call: grpc.ServerUnaryCall<WireStepCall, ActReply>, callback: grpc.sendUnaryData<ActReply>) =>
        void this.single('act', call, callback, (c, d) => this.barrier.act(c, d)),
      Compensate: (call: grpc.ServerUnaryCall<WireStepCall, CompensateReply>, callback: grpc.sendUnaryData<CompensateReply>) =>
        void this.single('compensate', call, callback, (c, d) => this.barrier.compensate(c, d)),
      ActBatch: (call: grpc.ServerUnaryCall<StepCallBatch, unknown>, callback: grpc.sendUnaryData<unknown>) =>
        void this.batch('act', call, callback, (c, d) => this.barrier.act(c, d)),
      CompensateBatch: (call: grpc.ServerUnaryCall<StepCallBatch, unknown>, callback: grpc.sendUnaryData<unknown>) =>
        void this.batch('compensate', call, callback, (c, d) => this.barrier.compensate(c, d)),
    });
    server.addService(pkg.OperationHistoryService.service, {
      ListOperations: (
        call: grpc.ServerUnaryCall<ListOperationsRequest, ListOperationsResponse>,
        callback: grpc.sendUnaryData<ListOperationsResponse>,
      ) => void this.listOperations(call, callback),
    });
  }

  /** Stops accepting calls, lets the ones in flight finish (10 s at most), closes MongoDB if it is ours. */
  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, SHUTDOWN_GRACE_MS);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    if (this.client && this.ownsClient) {
      await this.client.close().catch(() => undefined);
      this.client = undefined;
      this.barrierInstance = undefined;
    }
  }

  /** One Act or Compensate: token, validation, admission, barrier, one log line. */
  private async single<R extends ActReply | CompensateReply>(
    rpc: 'act' | 'compensate',
    call: grpc.ServerUnaryCall<WireStepCall, R>,
    callback: grpc.sendUnaryData<R>,
    run: (checked: StepCall, deadline: number) => Promise<R>,
  ): Promise<void> {
    const started = Date.now();
    const fields = callFields(rpc, call.request);
    try {
      this.tokens.requireService(call.metadata);
      const deadline = deadlineOf(call);
      const reply = await this.one(call.request, deadline, run);
      this.log('info', rpc, { ...fields, ...reply, duration_ms: Date.now() - started });
      callback(null, reply);
    } catch (error) {
      const failure = serviceError(error);
      this.log('warn', `${rpc} failed`, { ...fields, code: failure.code, error: describe(error), duration_ms: Date.now() - started });
      callback(failure);
    }
  }

  private one<R>(request: WireStepCall, deadline: number, run: (checked: StepCall, deadline: number) => Promise<R>): Promise<R> {
    const checked = checkStepCall(request);
    return this.admission.run(deadline, () => run(checked, deadline));
  }

  /** A batch: refused whole only for its token or size; otherwise each call's own result, in order. */
  private async batch<R extends ActReply | CompensateReply>(
    rpc: 'act' | 'compensate',
    call: grpc.ServerUnaryCall<StepCallBatch, unknown>,
    callback: grpc.sendUnaryData<unknown>,
    run: (checked: StepCall, deadline: number) => Promise<R>,
  ): Promise<void> {
    const started = Date.now();
    const calls = call.request.calls ?? [];
    const max = this.options.maxBatchCalls ?? DEFAULT_MAX_BATCH_CALLS;
    try {
      this.tokens.requireService(call.metadata);
      if (calls.length > max) throw new InvalidArgument('calls', `${calls.length} calls in one batch, at most ${max}`);
    } catch (error) {
      const failure = serviceError(error);
      this.log('warn', `${rpc}_batch refused`, { calls: calls.length, code: failure.code, error: describe(error) });
      callback(failure);
      return;
    }
    const deadline = deadlineOf(call);
    const results = await pool(calls, this.options.batchConcurrency ?? DEFAULT_BATCH_CONCURRENCY, async (batched, i) =>
      this.batchedCall(rpc, batched, i, deadline, run),
    );
    this.log('info', `${rpc}_batch`, { calls: calls.length, duration_ms: Date.now() - started });
    callback(null, { results });
  }

  private async batchedCall<R extends ActReply | CompensateReply>(
    rpc: 'act' | 'compensate',
    batched: BatchedStepCall,
    i: number,
    deadline: number,
    run: (checked: StepCall, deadline: number) => Promise<R>,
  ): Promise<{ request_id: string; reply?: R; error?: CallError }> {
    const started = Date.now();
    const request_id = batched.call?.request_id ?? '';
    const fields: LogFields = { ...(batched.call ? callFields(rpc, batched.call) : { rpc }), batch_index: i };
    if (batched.traceparent) fields.traceparent = batched.traceparent;
    try {
      if (!batched.call) throw new InvalidArgument(`calls[${i}].call`, 'must be set');
      const reply = await this.one(batched.call, deadline, run);
      this.log('info', rpc, { ...fields, ...reply, duration_ms: Date.now() - started });
      return { request_id, reply };
    } catch (error) {
      const s = statusOf(error);
      this.log('warn', `${rpc} failed`, { ...fields, code: s.code, error: describe(error), duration_ms: Date.now() - started });
      return { request_id, error: { code: s.code, message: s.message, details: s.details } };
    }
  }

  private async listOperations(
    call: grpc.ServerUnaryCall<ListOperationsRequest, ListOperationsResponse>,
    callback: grpc.sendUnaryData<ListOperationsResponse>,
  ): Promise<void> {
    try {
      this.tokens.requireServiceOrAdmin(call.metadata);
      const requestId = checkRequestId(call.request.request_id);
      callback(null, { operations: await listOperations(this.history, requestId) });
    } catch (error) {
      const failure = serviceError(error);
      this.log('warn', 'list_operations failed', { request_id: clip(call.request.request_id), error: describe(error) });
      callback(failure);
    }
  }
}

/** The call's deadline in ms since the epoch (Infinity when the caller set none). */
export function deadlineOf(call: grpc.ServerUnaryCall<unknown, unknown>): number {
  const deadline = call.getDeadline();
  return deadline instanceof Date ? deadline.getTime() : deadline;
}

function callFields(rpc: string, call: WireStepCall): LogFields {
  return {
    rpc,
    request_id: clip(call.request_id),
    saga_id: clip(call.saga_id),
    step: clip(call.step),
    attempt: call.attempt,
  };
}

/** Ids as logged: a hostile 1 MB id is cut, not echoed. */
function clip(value: string | undefined): string {
  const v = value ?? '';
  return v.length > 160 ? `${v.slice(0, 160)}…` : v;
}

/** Maps `items` with at most `concurrency` at once; results in the items' order. */
async function pool<I, O>(items: I[], concurrency: number, work: (item: I, index: number) => Promise<O>): Promise<O[]> {
  const results = new Array<O>(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      results[i] = await work(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  return results;
}

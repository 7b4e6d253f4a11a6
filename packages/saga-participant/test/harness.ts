/**
 * What the package's tests share: a participant started in this process
 * from plain Node (`SagaParticipant.start`, port 0, its own database on the
 * MongoDB of `MONGODB_URI` — SecantusDB in the project's test command), a
 * real gRPC client of both participant.v1 services built from the
 * package's protos, StepCalls with fresh ids, and the status details of a
 * failure decoded.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { MongoClient, type Db } from 'mongodb';
import {
  PARTICIPANT_PROTOS,
  SagaParticipant,
  decodeStatus,
  loaderOptions,
  silentLogger,
  type ParticipantOptions,
  type RpcStatus,
  type StepHandlers,
} from '../src/index.js';
import type { ActReply, CompensateReply, ListOperationsResponse, OrderLine, WireStepCall } from '../src/wire.js';

export function mongoUri(): string {
  const uri = process.env.MONGODB_URI;
  if (!uri) {
    throw new Error(
      'MONGODB_URI is not set: run these tests against a MongoDB, e.g. through scripts/test-examples.sh ' +
        '(which starts SecantusDB) or MONGODB_URI=mongodb://127.0.0.1:<port>/?directConnection=true npm test',
    );
  }
  return uri;
}

/** A fresh database name for one test's participant. */
export function freshDatabase(prefix = 'participant_test'): string {
  return `${prefix}_${randomUUID().slice(0, 8)}`;
}

export interface Running {
  participant: SagaParticipant;
  client: StepClient;
  db: Db;
  /** Closes the gRPC client and the participant (and its MongoDB client). */
  close: () => Promise<void>;
}

/** A participant with `handlers` on a free port and its own database. */
export async function startParticipant(
  handlers: StepHandlers,
  options: Partial<ParticipantOptions> = {},
): Promise<Running> {
  const participant = await SagaParticipant.start({
    mongodbUri: mongoUri(),
    database: freshDatabase(),
    listen: '127.0.0.1:0',
    logger: silentLogger,
    serviceName: 'participant-test',
    ...options,
    handlers,
  });
  const client = new StepClient(participant.port);
  return {
    participant,
    client,
    db: participant.db,
    close: async () => {
      client.close();
      await participant.close();
    },
  };
}

export interface CallOptions {
  token?: string;
  deadlineMs?: number;
}

export interface ActResult {
  request_id: string;
  result: 'reply' | 'error';
  reply?: ActReply;
  error?: { code: number; message: string; details: Buffer };
}

export interface CompensateResult {
  request_id: string;
  result: 'reply' | 'error';
  reply?: CompensateReply;
  error?: { code: number; message: string; details: Buffer };
}

/** A gRPC client of both participant.v1 services, promise-based. */
export class StepClient {
  private readonly step: grpc.Client & Record<string, Function>;
  private readonly history: grpc.Client & Record<string, Function>;

  constructor(port: number) {
    const definition = protoLoader.loadSync(PARTICIPANT_PROTOS, { ...loaderOptions(), oneofs: true });
    const pkg = grpc.loadPackageDefinition(definition) as any;
    const credentials = grpc.credentials.createInsecure();
    this.step = new pkg.participant.v1.SagaStepService(`127.0.0.1:${port}`, credentials);
    this.history = new pkg.participant.v1.OperationHistoryService(`127.0.0.1:${port}`, credentials);
  }

  act(call: WireStepCall, options: CallOptions = {}): Promise<ActReply> {
    return unary(this.step, 'Act', call, options);
  }

  compensate(call: WireStepCall, options: CallOptions = {}): Promise<CompensateReply> {
    return unary(this.step, 'Compensate', call, options);
  }

  async actBatch(calls: (WireStepCall | null)[], options: CallOptions = {}): Promise<ActResult[]> {
    const reply = await unary<{ results: ActResult[] }>(this.step, 'ActBatch', batch(calls), options);
    return reply.results;
  }

  async compensateBatch(calls: (WireStepCall | null)[], options: CallOptions = {}): Promise<CompensateResult[]> {
    const reply = await unary<{ results: CompensateResult[] }>(this.step, 'CompensateBatch', batch(calls), options);
    return reply.results;
  }

  listOperations(requestId: string, options: CallOptions = {}): Promise<ListOperationsResponse> {
    return unary(this.history, 'ListOperations', { request_id: requestId }, options);
  }

  close(): void {
    this.step.close();
    this.history.close();
  }
}

function batch(calls: (WireStepCall | null)[]): unknown {
  return { calls: calls.map((call) => (call === null ? { traceparent: '' } : { call, traceparent: '' })) };
}

function unary<T>(client: Record<string, Function>, method: string, request: unknown, options: CallOptions): Promise<T> {
  const metadata = new grpc.Metadata();
  if (options.token !== undefined) metadata.set('authorization', `Bearer ${options.token}`);
  const deadline = new Date(Date.now() + (options.deadlineMs ?? 15_000));
  return new Promise((resolve, reject) => {
    client[method]!(request, metadata, { deadline }, (error: grpc.ServiceError | null, reply: T) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

export interface Failure {
  code: grpc.status;
  details: string;
  /** The google.rpc.Status of `grpc-status-details-bin`, when sent. */
  status: RpcStatus | undefined;
}

/** The status a call failed with, its message and decoded details; fails if it succeeded. */
export async function failure(promise: Promise<unknown>): Promise<Failure> {
  let reply: unknown;
  try {
    reply = await promise;
  } catch (error) {
    const e = error as grpc.ServiceError;
    if (typeof e.code !== 'number') throw error;
    const bin = e.metadata?.get('grpc-status-details-bin')[0];
    return { code: e.code, details: e.details, status: bin ? decodeStatus(bin as Buffer) : undefined };
  }
  throw new Error(`expected the call to fail, it answered ${JSON.stringify(reply)}`);
}

/** A StepCall for a fresh saga: step `ship`, attempt 1, one line of `sku-apple` unless given. */
export function stepCall(lines: Partial<OrderLine>[] = [{}], step = 'ship'): WireStepCall & { order: NonNullable<WireStepCall['order']> } {
  const sagaId = randomUUID();
  const full = lines.map((line) => ({ product_id: 'sku-apple', quantity: '2', unit_price_cents: '150', ...line }));
  const total = full.reduce((sum, l) => sum + BigInt(l.quantity) * BigInt(l.unit_price_cents), 0n);
  return {
    request_id: `${sagaId}:${step}`,
    saga_id: sagaId,
    step,
    attempt: 1,
    order: { order_id: `order-${sagaId}`, customer_id: 'alice', lines: full, total_cents: String(total) },
  };
}

/** The same call, attempt `n` (a retry: same request id, same parameters). */
export function attempt<T extends WireStepCall>(call: T, n: number): T {
  return { ...call, attempt: n };
}

/** A MongoDB client of its own on `database`, to look at what was written. */
export async function openDb(database: string): Promise<{ db: Db; client: MongoClient; close: () => Promise<void> }> {
  const client = new MongoClient(mongoUri(), { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  return { db: client.db(database), client, close: () => client.close() };
}

/** Sets MongoDB's `failCommand` failpoint; false when the server has no test commands. */
export async function failCommand(db: Db, mode: unknown, data: Record<string, unknown>): Promise<boolean> {
  try {
    await db.admin().command({ configureFailPoint: 'failCommand', mode, data });
    return true;
  } catch {
    return false;
  }
}

export async function failCommandOff(db: Db): Promise<void> {
  await db.admin().command({ configureFailPoint: 'failCommand', mode: 'off' }).catch(() => undefined);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

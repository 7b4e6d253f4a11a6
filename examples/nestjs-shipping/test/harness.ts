/**
 * What every test file shares: the app started as a child process exactly as
 * it runs in production (`node dist/src/main.js`, configured by env, ready
 * when it prints `READY <port>`), a real gRPC client of participant.v1 (the
 * contract's protos as @saga/participant ships them), StepCalls with fresh
 * ids, and a MongoDB client to look at what was written. MongoDB is the one
 * given by `MONGODB_URI` (SecantusDB in the project's test command); each app
 * gets its own database.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { MongoClient, type Db } from 'mongodb';
import {
  decodeStatus,
  loadParticipantPackage,
  type ActResult,
  type ActReply,
  type CompensateReply,
  type CompensateResult,
  type ErrorInfo,
  type ListOperationsResponse,
  type OrderLine,
  type WireStepCall as StepCall,
} from '@saga/participant';

/** The example's directory (this file is compiled to dist/test/). */
export const APP_DIR = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = path.join(APP_DIR, 'dist/src/main.js');

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

export interface RunningApp {
  port: number;
  database: string;
  /** Everything the app wrote to stderr so far (its JSON log lines). */
  stderr: () => string;
  /** SIGTERM, then the exit code (the test fails on a hang past 15 s). */
  stop: () => Promise<number | null>;
  child: ChildProcess;
}

/** Starts the app with `env` on a free port and its own database; resolves once READY. */
export async function startApp(env: Record<string, string> = {}): Promise<RunningApp> {
  const database = `shipping_test_${randomUUID().slice(0, 8)}`;
  const child = spawn(process.execPath, [MAIN], {
    env: {
      PATH: process.env.PATH ?? '',
      MONGODB_URI: mongoUri(),
      MONGODB_DATABASE: database,
      SHIPPING_LISTEN: '127.0.0.1:0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  killedOnExit(child);
  const port = await readyPort(child, exited, () => stderr);
  return {
    port,
    database,
    child,
    stderr: () => stderr,
    stop: async () => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/**
 * A test that fails before it stops its app must not hang the run: the
 * child does not keep this process alive, and is killed when it exits.
 */
function killedOnExit(child: ChildProcess): void {
  child.unref();
  (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
  (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  child.once('exit', () => process.off('exit', kill));
}

/** Runs the app to its exit (for configurations it must refuse); returns the code and stderr. */
export async function runAppToExit(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [MAIN], {
    env: { PATH: process.env.PATH ?? '', MONGODB_URI: mongoUri(), SHIPPING_LISTEN: '127.0.0.1:0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, stdout, stderr };
}

function readyPort(child: ChildProcess, exited: Promise<number | null>, stderr: () => string): Promise<number> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no READY line within 60 s; stderr:\n${stderr()}`));
    }, 60_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /^READY (\d+)$/m.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the app exited (${code}) before READY; stderr:\n${stderr()}`));
    });
  });
}

/** A gRPC client of both participant.v1 services, promise-based. */
export class Participant {
  private readonly step: grpc.Client & Record<string, Function>;
  private readonly history: grpc.Client & Record<string, Function>;

  constructor(port: number) {
    const pkg = loadParticipantPackage();
    const credentials = grpc.credentials.createInsecure();
    this.step = new pkg.SagaStepService(`127.0.0.1:${port}`, credentials) as grpc.Client & Record<string, Function>;
    this.history = new pkg.OperationHistoryService(`127.0.0.1:${port}`, credentials) as grpc.Client & Record<string, Function>;
  }

  act(call: StepCall, options: CallOptions = {}): Promise<ActReply> {
    return unary(this.step, 'Act', call, options);
  }

  compensate(call: StepCall, options: CallOptions = {}): Promise<CompensateReply> {
    return unary(this.step, 'Compensate', call, options);
  }

  /** An ActBatch of `calls`; each call's own result, in order. */
  async actBatch(calls: StepCall[], options: CallOptions = {}): Promise<ActResult[]> {
    return (await unary<{ results: ActResult[] }>(this.step, 'ActBatch', batch(calls), options)).results;
  }

  /** A CompensateBatch of `calls`; each call's own result, in order. */
  async compensateBatch(calls: StepCall[], options: CallOptions = {}): Promise<CompensateResult[]> {
    return (await unary<{ results: CompensateResult[] }>(this.step, 'CompensateBatch', batch(calls), options)).results;
  }

  listOperations(requestId: string, options: CallOptions = {}): Promise<ListOperationsResponse> {
    return unary(this.history, 'ListOperations', { request_id: requestId }, options);
  }

  close(): void {
    this.step.close();
    this.history.close();
  }
}

export interface CallOptions {
  token?: string;
  deadlineMs?: number;
}

function batch(calls: StepCall[]): unknown {
  return { calls: calls.map((call) => ({ call, traceparent: '' })) };
}

function unary<T>(client: Record<string, Function>, method: string, request: unknown, options: CallOptions): Promise<T> {
  const metadata = new grpc.Metadata();
  if (options.token !== undefined) metadata.set('authorization', `Bearer ${options.token}`);
  const deadline = new Date(Date.now() + (options.deadlineMs ?? 10_000));
  return new Promise((resolve, reject) => {
    client[method]!(request, metadata, { deadline }, (error: grpc.ServiceError | null, reply: T) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

export interface Failure {
  code: grpc.status;
  details: string;
  /** The google.rpc.ErrorInfo of the status details, when sent. */
  errorInfo: ErrorInfo | undefined;
}

/** Resolves to the gRPC status a call failed with (code, message, ErrorInfo); fails if it succeeded. */
export async function failure(promise: Promise<unknown>): Promise<Failure> {
  let reply: unknown;
  try {
    reply = await promise;
  } catch (error) {
    const e = error as grpc.ServiceError;
    if (typeof e.code !== 'number') throw error;
    const bin = e.metadata?.get('grpc-status-details-bin')[0];
    return { code: e.code, details: e.details, errorInfo: bin ? decodeStatus(bin as Buffer).errorInfo : undefined };
  }
  throw new Error(`expected the call to fail, it answered ${JSON.stringify(reply)}`);
}

/** A StepCall for a fresh saga: step `shipping`, attempt 1, one line of `sku-apple` unless given. */
export function stepCall(lines: Partial<OrderLine>[] = [{}]): StepCall & { order: NonNullable<StepCall['order']> } {
  const sagaId = randomUUID();
  const full = lines.map((line) => ({ product_id: 'sku-apple', quantity: '2', unit_price_cents: '150', ...line }));
  const total = full.reduce((sum, l) => sum + BigInt(l.quantity) * BigInt(l.unit_price_cents), 0n);
  return {
    request_id: `${sagaId}:shipping`,
    saga_id: sagaId,
    step: 'shipping',
    attempt: 1,
    order: { order_id: `order-${sagaId}`, customer_id: 'alice', lines: full, total_cents: String(total) },
  };
}

/** The same call, attempt `n` (a retry: same request id, same parameters). */
export function attempt<T extends StepCall>(call: T, n: number): T {
  return { ...call, attempt: n };
}

/** The app's database, to count what was written. */
export async function openDb(database: string): Promise<{ db: Db; close: () => Promise<void> }> {
  const client = new MongoClient(mongoUri(), { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  return { db: client.db(database), close: () => client.close() };
}

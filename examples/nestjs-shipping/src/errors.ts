/**
 * Why a call fails, as types, and the one place that turns them into gRPC
 * status codes. The code is the contract (docs/participant-protocol.md, "How
 * an answer is read"): INVALID_ARGUMENT and ALREADY_EXISTS are final, so the
 * orchestrator compensates; UNAVAILABLE and INTERNAL mean "unknown, retry with
 * the same request id", which the operationHistory makes safe. A business
 * refusal is not an error at all: it is an `OUTCOME_REFUSED` reply, recorded.
 */
import { status } from '@grpc/grpc-js';
import { RpcException } from '@nestjs/microservices';
import { MongoError, MongoNetworkError, MongoServerSelectionError } from 'mongodb';

/** The call itself is malformed: it can never succeed. Names the field. */
export class InvalidArgument extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

/** No or wrong bearer token. */
export class Unauthenticated extends Error {}

/** The request id was recorded with other parameters: a bug in the caller. */
export class ParameterMismatch extends Error {
  constructor(requestId: string, kind: string, difference: string) {
    const key = JSON.stringify(requestId);
    super(`request_id ${key} was reused with different parameters (${kind} record): ${difference}`);
  }
}

/** The store cannot answer now (down, conflict not resolved in time): nothing was recorded. */
export class Unavailable extends Error {}

/** The operationHistory holds what the protocol never leaves behind: reported, never guessed at. */
export class Corrupt extends Error {}

/** Error labels and codes MongoDB uses for failures that may pass on a retry. */
const TRANSIENT_LABELS = ['TransientTransactionError', 'UnknownTransactionCommitResult', 'RetryableWriteError'];
const TRANSIENT_CODES = new Set([
  6, 7, 89, 91, 112, 189, 251, 262, 9001, 10107, 11600, 11602, 13435, 13436,
]);

/** True for a MongoDB failure a retry of the same call may get past. */
export function isTransient(error: unknown): boolean {
  if (error instanceof MongoNetworkError || error instanceof MongoServerSelectionError) return true;
  if (!(error instanceof MongoError)) return false;
  if (TRANSIENT_LABELS.some((label) => error.hasErrorLabel(label))) return true;
  return typeof error.code === 'number' && TRANSIENT_CODES.has(error.code);
}

/** The gRPC status for any failure of a call (never throws). */
export function toRpcException(error: unknown): RpcException {
  const rpc = (code: status, message: string) => new RpcException({ code, message });
  if (error instanceof RpcException) return error;
  if (error instanceof InvalidArgument) return rpc(status.INVALID_ARGUMENT, error.message);
  if (error instanceof Unauthenticated) return rpc(status.UNAUTHENTICATED, error.message);
  if (error instanceof ParameterMismatch) return rpc(status.ALREADY_EXISTS, error.message);
  if (error instanceof Unavailable) return rpc(status.UNAVAILABLE, error.message);
  if (isTransient(error)) return rpc(status.UNAVAILABLE, `store unavailable: ${describe(error)}`);
  return rpc(status.INTERNAL, describe(error));
}

/** One line for logs and status messages, whatever was thrown. */
export function describe(error: unknown): string {
  if (error instanceof MongoError) return `${error.name} ${error.code ?? ''}: ${error.message}`.replace(/\s+/g, ' ');
  if (error instanceof Error) return error.message;
  return String(error);
}

/**
 * Why a call fails, as types, and the one place that turns them into gRPC
 * statuses with their `google.rpc` details (docs/participant-protocol.md,
 * "How an answer is read" and "Error details"):
 *
 * | error                 | code                | details                                          |
 * |-----------------------|---------------------|--------------------------------------------------|
 * | `InvalidArgument`     | INVALID_ARGUMENT    | BadRequest naming the field                      |
 * | `Unauthenticated`     | UNAUTHENTICATED     | ErrorInfo `auth.saga` SERVICE/READ_TOKEN_REQUIRED |
 * | `ParameterMismatch`   | ALREADY_EXISTS      | ErrorInfo REQUEST_ID_REUSED (request_id, kind, field) |
 * | `Unavailable`         | UNAVAILABLE         | ErrorInfo STORE_UNAVAILABLE or OVERLOADED        |
 * | a transient MongoDB error | UNAVAILABLE     | ErrorInfo STORE_UNAVAILABLE                      |
 * | `Corrupt`             | INTERNAL            | ErrorInfo STORED_DATA_CORRUPT                    |
 * | `StepError` (a team's) | its code           | its ErrorInfo, if any                            |
 * | anything else         | INTERNAL            | none                                             |
 *
 * A business refusal is not an error: it is an `OUTCOME_REFUSED` reply,
 * recorded.
 */
import { Metadata, status as Code } from '@grpc/grpc-js';
import { encodeStatus, type ErrorInfo, type FieldViolation } from './rpc-status.js';

/** The ErrorInfo domain of what the participant itself decides. */
export const DOMAIN = 'participant.v1';
/** The ErrorInfo domain of refused tokens. */
export const AUTH_DOMAIN = 'auth.saga';

export const REQUEST_ID_REUSED = 'REQUEST_ID_REUSED';
export const ALREADY_COMPENSATED = 'ALREADY_COMPENSATED';
export const STORE_UNAVAILABLE = 'STORE_UNAVAILABLE';
export const STORED_DATA_CORRUPT = 'STORED_DATA_CORRUPT';
/** A call not taken on: its deadline passed, or too many calls at work (this package's own reason). */
export const OVERLOADED = 'OVERLOADED';
export const SERVICE_TOKEN_REQUIRED = 'SERVICE_TOKEN_REQUIRED';
export const READ_TOKEN_REQUIRED = 'READ_TOKEN_REQUIRED';

/** The call itself is malformed: it can never succeed. Names the field as the request spells it. */
export class InvalidArgument extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

/** No or wrong bearer token; `reason` is the ErrorInfo reason. */
export class Unauthenticated extends Error {
  constructor(
    message: string,
    readonly reason: string = SERVICE_TOKEN_REQUIRED,
  ) {
    super(message);
  }
}

/** The request id was recorded with other parameters: a bug in the caller. */
export class ParameterMismatch extends Error {
  constructor(
    readonly requestId: string,
    readonly kind: string,
    /** The first differing field (`order.lines[0].quantity`), when known. */
    readonly field: string | undefined,
    difference: string,
  ) {
    super(`request_id ${JSON.stringify(requestId)} was reused with different parameters (${kind} record): ${difference}`);
  }
}

/** The call cannot be answered now (store down, conflict not resolved in time, overloaded): nothing was recorded. */
export class Unavailable extends Error {
  constructor(
    message: string,
    readonly reason: string = STORE_UNAVAILABLE,
  ) {
    super(message);
  }
}

/** The operationHistory holds what the protocol never leaves behind: reported, never guessed at. */
export class Corrupt extends Error {}

/**
 * A failure a team's handler decides, with its gRPC code and, optionally,
 * an ErrorInfo (e.g. `new StepError(status.FAILED_PRECONDITION, 'account closed',
 * { domain: 'shipping.v1', reason: 'ACCOUNT_CLOSED' })`). Throwing it rolls the
 * call's transaction back; nothing is recorded. For a business refusal that
 * should be recorded and replayed, return `refused(...)` instead.
 */
export class StepError extends Error {
  constructor(
    readonly code: Code,
    message: string,
    readonly info?: { domain: string; reason: string; metadata?: Record<string, string> },
  ) {
    super(message);
  }
}

/** Error labels and codes MongoDB uses for failures that may pass on a retry. */
const TRANSIENT_LABELS = ['TransientTransactionError', 'UnknownTransactionCommitResult', 'RetryableWriteError'];
const TRANSIENT_CODES = new Set([6, 7, 89, 91, 112, 189, 251, 262, 9001, 10107, 11600, 11602, 13435, 13436]);
const TRANSIENT_NAMES = new Set([
  'MongoNetworkError',
  'MongoNetworkTimeoutError',
  'MongoServerSelectionError',
  'MongoTopologyClosedError',
  'MongoPoolClearedError',
]);

/** Whether a MongoDB error carries `label` (checked by shape, whichever copy of the driver threw it). */
export function hasLabel(error: unknown, label: string): boolean {
  const e = error as { hasErrorLabel?: (label: string) => boolean; errorLabels?: string[] } | null;
  if (e === null || typeof e !== 'object') return false;
  if (typeof e.hasErrorLabel === 'function') return e.hasErrorLabel(label);
  return Array.isArray(e.errorLabels) && e.errorLabels.includes(label);
}

/** A duplicate-key error (11000) from any insert or update. */
export function isDuplicateKey(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 11000;
}

/** True for a MongoDB failure a retry of the same call may get past. */
export function isTransient(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false;
  const name = (error as { name?: unknown }).name;
  if (typeof name === 'string' && TRANSIENT_NAMES.has(name)) return true;
  if (TRANSIENT_LABELS.some((label) => hasLabel(error, label))) return true;
  const code = (error as { code?: unknown }).code;
  return typeof name === 'string' && name.startsWith('Mongo') && typeof code === 'number' && TRANSIENT_CODES.has(code);
}

/** A failure as gRPC answers it: code, message and the encoded google.rpc.Status (empty: none). */
export interface StatusOf {
  code: Code;
  message: string;
  details: Buffer;
}

/** The status for any failure of a call (never throws). */
export function statusOf(error: unknown): StatusOf {
  const info = (code: Code, message: string, errorInfo: ErrorInfo): StatusOf => ({
    code,
    message,
    details: encodeStatus(code, message, { errorInfo }),
  });
  const badRequest = (message: string, violations: FieldViolation[]): StatusOf => ({
    code: Code.INVALID_ARGUMENT,
    message,
    details: encodeStatus(Code.INVALID_ARGUMENT, message, { badRequest: violations }),
  });
  if (error instanceof InvalidArgument) {
    return badRequest(error.message, [{ field: error.field, description: error.problem }]);
  }
  if (error instanceof Unauthenticated) {
    return info(Code.UNAUTHENTICATED, error.message, { domain: AUTH_DOMAIN, reason: error.reason, metadata: {} });
  }
  if (error instanceof ParameterMismatch) {
    const metadata: Record<string, string> = { request_id: error.requestId, kind: error.kind };
    if (error.field !== undefined) metadata.field = error.field;
    return info(Code.ALREADY_EXISTS, error.message, { domain: DOMAIN, reason: REQUEST_ID_REUSED, metadata });
  }
  if (error instanceof Unavailable) {
    return info(Code.UNAVAILABLE, error.message, { domain: DOMAIN, reason: error.reason, metadata: {} });
  }
  if (error instanceof Corrupt) {
    return info(Code.INTERNAL, error.message, { domain: DOMAIN, reason: STORED_DATA_CORRUPT, metadata: {} });
  }
  if (error instanceof StepError) {
    if (!error.info) return { code: error.code, message: error.message, details: Buffer.alloc(0) };
    return info(error.code, error.message, { metadata: {}, ...error.info });
  }
  if (isTransient(error)) {
    return info(Code.UNAVAILABLE, `store unavailable: ${describe(error)}`, {
      domain: DOMAIN,
      reason: STORE_UNAVAILABLE,
      metadata: {},
    });
  }
  return { code: Code.INTERNAL, message: describe(error), details: Buffer.alloc(0) };
}

/** What a grpc-js handler passes to its callback for a failure: the status with its details trailer. */
export function serviceError(error: unknown): { code: Code; details: string; metadata: Metadata } {
  const s = statusOf(error);
  const metadata = new Metadata();
  if (s.details.length > 0) metadata.set('grpc-status-details-bin', s.details);
  return { code: s.code, details: s.message, metadata };
}

/** One line for logs and status messages, whatever was thrown. */
export function describe(error: unknown): string {
  if (error instanceof Error && error.name.startsWith('Mongo')) {
    const code = (error as { code?: unknown }).code;
    return `${error.name} ${code ?? ''}: ${error.message}`.replace(/\s+/g, ' ');
  }
  if (error instanceof Error) return error.message;
  return String(error);
}

/**
 * `@saga/participant`: a saga participant of `participant.v1.SagaStepService`
 * for Node over MongoDB. A team writes `act(call, session)` and
 * `compensate(call, session)`; the package gives the operationHistory
 * barrier, batches, the service token, error details, ListOperations and
 * the history retention. NestJS: `@saga/participant/nest`.
 */
export { SagaParticipant, deadlineOf, DEFAULT_BATCH_CONCURRENCY, DEFAULT_MAX_BATCH_CALLS, DEFAULT_MAX_RECEIVE_BYTES } from './participant.js';
export type { ParticipantOptions } from './participant.js';
export { applied, refused, undone, nothingToUndo } from './step.js';
export type { ActOutcome, CompensateOutcome, ActContext, CompensateContext, Listing, StepHandlers } from './step.js';
export { checkStepCall, checkRequestId, idProblem, INVISIBLE_FORMAT, MAX_ID_BYTES } from './validate.js';
export type { StepCall } from './validate.js';
export {
  InvalidArgument,
  Unauthenticated,
  ParameterMismatch,
  Unavailable,
  Corrupt,
  StepError,
  statusOf,
  serviceError,
  describe,
  isTransient,
  isDuplicateKey,
  hasLabel,
  DOMAIN,
  AUTH_DOMAIN,
  REQUEST_ID_REUSED,
  ALREADY_COMPENSATED,
  STORE_UNAVAILABLE,
  STORED_DATA_CORRUPT,
  OVERLOADED,
  SERVICE_TOKEN_REQUIRED,
  READ_TOKEN_REQUIRED,
} from './errors.js';
export { encodeStatus, decodeStatus, ERROR_INFO_TYPE, BAD_REQUEST_TYPE } from './rpc-status.js';
export type { RpcStatus, ErrorInfo, FieldViolation } from './rpc-status.js';
export { Admission, DEFAULT_MAX_IN_FLIGHT } from './admission.js';
export { TokenPolicy } from './auth.js';
export { Barrier } from './barrier.js';
export type { BarrierOptions } from './barrier.js';
export { transact, insertRecord, budgetEnd, KeyTaken, DEADLINE_MARGIN_MS, NO_DEADLINE_BUDGET_MS } from './transaction.js';
export { ConflictLimit, conflictLimitOf, MAX_TRANSACTIONS, COMMITS_TO_RISE } from './conflict-limit.js';
export type { Permit } from './conflict-limit.js';
export type { TransactStats } from './transaction.js';
export { fingerprint, difference, newRecord } from './records.js';
export type { OperationRecord, RecordStatus, Kind, Params } from './records.js';
export { listOperations, toOperation } from './history.js';
export { connectMongo, ensureHistoryIndexes, SERVER_SELECTION_TIMEOUT_MS, DEFAULT_STARTUP_WAIT_MS } from './mongo.js';
export type { ConnectOptions } from './mongo.js';
export { insertPerLine, ensurePerLineIndex } from './lines.js';
export type { PerLine } from './lines.js';
export {
  ConfigError,
  checkRetention,
  participantConfigFromEnv,
  DEFAULT_HISTORY_RETENTION_SECONDS,
  DEFAULT_MIN_HISTORY_RETENTION_SECONDS,
} from './config.js';
export type { EnvConfig, EnvNames } from './config.js';
export { jsonLogger, silentLogger } from './log.js';
export type { Logger, LogLevel, LogFields } from './log.js';
export { PROTO_DIR, PARTICIPANT_PROTOS, loaderOptions, loadParticipantPackage } from './proto.js';
export type { ParticipantPackage } from './proto.js';
export type * from './wire.js';

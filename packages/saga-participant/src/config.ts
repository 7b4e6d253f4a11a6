/**
 * Configuration: the defaults, the retention rule, and an optional reading
 * of the environment (12-factor) with one line per problem naming the
 * variable.
 */
import { DEFAULT_MAX_IN_FLIGHT } from './admission.js';

/** Seven days: keep days, not minutes (docs/participant-protocol.md). */
export const DEFAULT_HISTORY_RETENTION_SECONDS = 7 * 24 * 3600;
/**
 * 46.5 minutes: twice the span the orchestrator's default limits allow for
 * calls of one request id, for a three-step saga (15.5 min per step); the
 * orchestrator logs the figure for its own saga as
 * `participants_history_retention_at_least`.
 */
export const DEFAULT_MIN_HISTORY_RETENTION_SECONDS = 2790;

/** A configuration the participant refuses to start with. */
export class ConfigError extends Error {}

/** Refuses a retention below the minimum (a late Act could apply again after its record expired). */
export function checkRetention(
  retention: number,
  minimum: number,
  names = { retention: 'historyRetentionSeconds', minimum: 'minHistoryRetentionSeconds' },
): void {
  for (const [name, value] of [
    [names.retention, retention],
    [names.minimum, minimum],
  ] as const) {
    if (!Number.isSafeInteger(value) || value <= 0) {
      throw new ConfigError(`${name}=${value}: expected a positive whole number of seconds`);
    }
  }
  if (retention < minimum) {
    throw new ConfigError(
      `${names.retention}=${retention} is below the minimum ${minimum} s ` +
        `(${names.minimum}; see docs/participant-protocol.md, "How long to keep the operationHistory"): ` +
        'a late Act could apply again after its record expired',
    );
  }
}

/** What `participantConfigFromEnv` reads. */
export interface EnvConfig {
  /** `host:port` the gRPC server binds; port 0 picks a free one. */
  listen: string;
  mongodbUri: string;
  database: string;
  serviceToken: string | undefined;
  adminToken: string | undefined;
  historyRetentionSeconds: number;
  minHistoryRetentionSeconds: number;
  maxInFlight: number;
}

/** Variable names and defaults of `participantConfigFromEnv`. */
export interface EnvNames {
  /** Default `PARTICIPANT_LISTEN`. */
  listen?: string;
  /** Default `PARTICIPANT_MAX_IN_FLIGHT`. */
  maxInFlight?: string;
  defaultListen?: string;
  defaultDatabase?: string;
}

/**
 * The participant's settings from the environment: `MONGODB_URI`,
 * `MONGODB_DATABASE`, `SERVICE_TOKEN`, `ADMIN_TOKEN`,
 * `HISTORY_RETENTION_SECONDS`, `MIN_HISTORY_RETENTION_SECONDS`, and the
 * listen address and in-flight bound under the names given. Throws
 * `ConfigError` naming the variable.
 */
export function participantConfigFromEnv(env: NodeJS.ProcessEnv = process.env, names: EnvNames = {}): EnvConfig {
  const listenVar = names.listen ?? 'PARTICIPANT_LISTEN';
  const inFlightVar = names.maxInFlight ?? 'PARTICIPANT_MAX_IN_FLIGHT';
  const retention = positive(env, 'HISTORY_RETENTION_SECONDS', DEFAULT_HISTORY_RETENTION_SECONDS, 'seconds');
  const minimum = positive(env, 'MIN_HISTORY_RETENTION_SECONDS', DEFAULT_MIN_HISTORY_RETENTION_SECONDS, 'seconds');
  checkRetention(retention, minimum, { retention: 'HISTORY_RETENTION_SECONDS', minimum: 'MIN_HISTORY_RETENTION_SECONDS' });
  return {
    listen: env[listenVar] || names.defaultListen || '127.0.0.1:50054',
    mongodbUri: env.MONGODB_URI || 'mongodb://127.0.0.1:27017/?directConnection=true',
    database: env.MONGODB_DATABASE || names.defaultDatabase || 'participant',
    serviceToken: token(env, 'SERVICE_TOKEN'),
    adminToken: token(env, 'ADMIN_TOKEN'),
    historyRetentionSeconds: retention,
    minHistoryRetentionSeconds: minimum,
    maxInFlight: positive(env, inFlightVar, DEFAULT_MAX_IN_FLIGHT, 'calls'),
  };
}

function positive(env: NodeJS.ProcessEnv, name: string, fallback: number, unit: string): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^[0-9]+$/.test(raw) || !Number.isSafeInteger(Number(raw)) || Number(raw) === 0) {
    throw new ConfigError(`${name}=${JSON.stringify(raw)}: expected a positive whole number of ${unit}`);
  }
  return Number(raw);
}

function token(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name];
  if (value === undefined || value === '') return undefined;
  if (/\s/.test(value)) throw new ConfigError(`${name}: a token must not contain whitespace`);
  return value;
}

/**
 * The service's configuration, from the environment only (12-factor, like the
 * orchestrator's `env` fallbacks), with defaults that work on a developer's
 * machine. Every problem is one line naming the variable, and the service does
 * not start.
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

export interface Config {
  /** `host:port` the gRPC server binds; port 0 picks a free one (printed as `READY <port>`). */
  listen: string;
  mongodbUri: string;
  mongodbDatabase: string;
  /** Bearer token Act and Compensate require (and ListOperations accepts); unset: open. */
  serviceToken: string | undefined;
  /** Second token ListOperations accepts (the console's). */
  adminToken: string | undefined;
  /** How long operationHistory records are kept (a TTL index removes them after). */
  historyRetentionSeconds: number;
  /** Product ids seeded into `shipping_rules` as unshippable at start-up. */
  unshippableProducts: string[];
  /** Most Act/Compensate calls at work at once; more wait within their deadline (admission.ts). */
  maxInFlight: number;
}

export class ConfigError extends Error {}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const retention = positive(env, 'HISTORY_RETENTION_SECONDS', DEFAULT_HISTORY_RETENTION_SECONDS, 'seconds');
  const minimum = positive(env, 'MIN_HISTORY_RETENTION_SECONDS', DEFAULT_MIN_HISTORY_RETENTION_SECONDS, 'seconds');
  if (retention < minimum) {
    throw new ConfigError(
      `HISTORY_RETENTION_SECONDS=${retention} is below the minimum ${minimum} s ` +
        '(MIN_HISTORY_RETENTION_SECONDS; see docs/participant-protocol.md, "How long to keep the operationHistory"): ' +
        'a late Act could apply again after its record expired',
    );
  }
  return {
    listen: env.SHIPPING_LISTEN || '127.0.0.1:50054',
    mongodbUri: env.MONGODB_URI || 'mongodb://127.0.0.1:27017/?directConnection=true',
    mongodbDatabase: env.MONGODB_DATABASE || 'shipping',
    serviceToken: token(env, 'SERVICE_TOKEN'),
    adminToken: token(env, 'ADMIN_TOKEN'),
    historyRetentionSeconds: retention,
    unshippableProducts: (env.UNSHIPPABLE_PRODUCTS ?? '')
      .split(',')
      .map((id) => id.trim())
      .filter((id) => id.length > 0),
    maxInFlight: positive(env, 'SHIPPING_MAX_IN_FLIGHT', DEFAULT_MAX_IN_FLIGHT, 'calls'),
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
  if (/\s/.test(value)) {
    throw new ConfigError(`${name}: a token must not contain whitespace`);
  }
  return value;
}

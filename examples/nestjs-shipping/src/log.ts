/**
 * JSON lines on stderr: one object per event, with the call's `request_id`,
 * `saga_id`, `step` and `attempt` when there is a call, so a saga can be
 * followed across the orchestrator's logs and this service's. stdout is kept
 * for the one `READY <port>` line scripts wait for.
 */
import type { LoggerService } from '@nestjs/common';

export type Fields = Record<string, unknown>;

export function log(level: 'info' | 'warn' | 'error', msg: string, fields: Fields = {}): void {
  const line = JSON.stringify({ ts: new Date().toISOString(), level, service: 'nestjs-shipping', msg, ...fields });
  process.stderr.write(`${line}\n`);
}

/** NestJS's own messages, as the same JSON lines. */
export class JsonLogger implements LoggerService {
  log(message: unknown, context?: string): void {
    log('info', String(message), context ? { context } : {});
  }
  error(message: unknown, trace?: string, context?: string): void {
    log('error', String(message), { ...(context ? { context } : {}), ...(trace ? { trace } : {}) });
  }
  warn(message: unknown, context?: string): void {
    log('warn', String(message), context ? { context } : {});
  }
}

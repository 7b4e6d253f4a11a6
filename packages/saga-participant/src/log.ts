/**
 * Logs: by default JSON lines on stderr, one object per event, with the
 * call's `request_id`, `saga_id`, `step` and `attempt` when there is one
 * (stdout stays free for a `READY <port>` line). Give your own `Logger` to
 * send them elsewhere.
 */

export type LogLevel = 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export type Logger = (level: LogLevel, msg: string, fields?: LogFields) => void;

/** JSON lines on stderr, each naming `service`. */
export function jsonLogger(service: string): Logger {
  return (level, msg, fields = {}) => {
    const line = JSON.stringify({ ts: new Date().toISOString(), level, service, msg, ...fields });
    process.stderr.write(`${line}\n`);
  };
}

/** Logs nothing. */
export const silentLogger: Logger = () => {};

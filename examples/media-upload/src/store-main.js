/**
 * The fake media store (src/media-store.js) as a process, for tests that
 * drive it from outside (the Rust scenarios and participant-check's test):
 * `MEDIA_STORE_LISTEN` (host:port, default 127.0.0.1:0: a free port),
 * `READY <port>` on stdout once it serves, its faults and state over the
 * `/admin/` routes, SIGTERM or SIGINT: close and exit 0.
 */
import { startMediaStore } from './media-store.js';

const listen = process.env.MEDIA_STORE_LISTEN || '127.0.0.1:0';
const match = /^(.+):(\d+)$/.exec(listen);
if (!match || Number(match[2]) > 65535) {
  process.stderr.write(`media-store: MEDIA_STORE_LISTEN=${JSON.stringify(listen)}: expected host:port\n`);
  process.exit(2);
}
const store = await startMediaStore({ host: match[1], port: Number(match[2]), admin: true });
process.stdout.write(`READY ${store.port}\n`);
const stop = () => void store.close().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);

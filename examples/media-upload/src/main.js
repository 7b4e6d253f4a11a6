/**
 * The media-upload participant as a process: settings from the
 * environment (MEDIA_LISTEN, MEDIA_STORE_URL, MEDIA_CALL_TIMEOUT_MS — the
 * longest one request to the store may take, 2000 by default, cut to the
 * call's deadline —, MONGODB_URI, MONGODB_DATABASE, SERVICE_TOKEN, ...; a
 * bad value stops it with one line and exit code 2), `READY <port>` on
 * stdout once it serves, SIGTERM or SIGINT: finish the calls in flight,
 * close MongoDB, exit 0.
 */
import { ConfigError, SagaParticipant, participantConfigFromEnv } from '@saga/participant';
import { mediaStep } from './media-step.js';

let config;
let callTimeoutMs = 2000;
try {
  config = participantConfigFromEnv(process.env, { listen: 'MEDIA_LISTEN', defaultListen: '127.0.0.1:50056', defaultDatabase: 'media' });
  if (!process.env.MEDIA_STORE_URL) throw new ConfigError('MEDIA_STORE_URL: the media store (http://host:port) is required');
  const timeout = process.env.MEDIA_CALL_TIMEOUT_MS;
  if (timeout !== undefined && timeout !== '') {
    callTimeoutMs = Number(timeout);
    if (!/^[0-9]+$/.test(timeout) || !Number.isSafeInteger(callTimeoutMs) || callTimeoutMs === 0) {
      throw new ConfigError(`MEDIA_CALL_TIMEOUT_MS=${JSON.stringify(timeout)}: expected a positive whole number of milliseconds`);
    }
  }
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`media-upload: ${error.message}\n`);
  process.exit(2);
}
const participant = await SagaParticipant.start({
  ...config,
  serviceName: 'media-upload',
  handlers: mediaStep({ storeUrl: process.env.MEDIA_STORE_URL, callTimeoutMs }),
});
process.stdout.write(`READY ${participant.port}\n`);
const stop = () => void participant.close().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);

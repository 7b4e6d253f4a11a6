/**
 * Start-up and shutdown: configuration (a bad value stops it with one line),
 * MongoDB (waited for up to `STARTUP_WAIT_MS`, indexes created, unshippable
 * products seeded), then the gRPC server; `READY <port>` on stdout once it
 * serves. SIGTERM or SIGINT: stop accepting calls, let the ones in flight
 * finish, close MongoDB, exit 0.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { openStore, type Store } from './db.js';
import { describe } from './errors.js';
import { ReportingGrpcServer } from './grpc-server.js';
import { JsonLogger, log } from './log.js';
import { protoDir } from './proto.js';

/** How long start-up waits for MongoDB to answer (a stack starting together). */
const STARTUP_WAIT_MS = 30_000;

async function main(): Promise<number> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`nestjs-shipping: ${error.message}\n`);
    return 2;
  }
  const store = await openStoreWhenUp(config);
  const server = new ReportingGrpcServer(config.listen);
  const app = await NestFactory.createMicroservice(AppModule.register(config, store), {
    strategy: server,
    logger: new JsonLogger(),
  });
  await app.listen();
  process.stdout.write(`READY ${server.port}\n`);
  log('info', 'serving', {
    port: server.port,
    database: config.mongodbDatabase,
    proto_dir: protoDir(),
    history_retention_seconds: config.historyRetentionSeconds,
    unshippable_products: config.unshippableProducts,
    service_token: config.serviceToken !== undefined,
  });
  await signalled();
  log('info', 'stopping');
  await app.close();
  await store.client.close();
  log('info', 'stopped');
  return 0;
}

async function openStoreWhenUp(config: Config): Promise<Store> {
  const giveUp = Date.now() + STARTUP_WAIT_MS;
  for (;;) {
    try {
      return await openStore(config);
    } catch (error) {
      if (Date.now() >= giveUp) throw error;
      log('warn', 'MongoDB not ready; retrying', { error: describe(error) });
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

function signalled(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`nestjs-shipping: ${describe(error)}\n`);
    process.exit(1);
  },
);

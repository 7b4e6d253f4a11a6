/**
 * Start-up and shutdown: the configuration (a bad value stops it with one
 * line and exit code 2), then the Nest application, whose participant
 * module waits for MongoDB (up to 30 s), creates the indexes, seeds the
 * unshippable products and serves; `READY <port>` on stdout once it does
 * (stdout carries nothing else; logs are JSON lines on stderr). SIGTERM or
 * SIGINT: stop accepting calls, let the ones in flight finish, close
 * MongoDB, exit 0.
 */
import 'reflect-metadata';
import type { LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ConfigError, describe, jsonLogger } from '@saga/participant';
import { SagaParticipant } from '@saga/participant/nest';
import { AppModule, SERVICE_NAME } from './app.module.js';
import { loadConfig, type Config } from './config.js';

const log = jsonLogger(SERVICE_NAME);

/** NestJS's own messages, as the same JSON lines. */
const nestLogger: LoggerService = {
  log: (message, context?: string) => log('info', String(message), context ? { context } : {}),
  warn: (message, context?: string) => log('warn', String(message), context ? { context } : {}),
  error: (message, trace?: string, context?: string) =>
    log('error', String(message), { ...(context ? { context } : {}), ...(trace ? { trace } : {}) }),
};

async function main(): Promise<number> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`${SERVICE_NAME}: ${error.message}\n`);
    return 2;
  }
  const app = await NestFactory.createApplicationContext(AppModule.register(config, log), {
    logger: nestLogger,
    abortOnError: false,
  });
  const participant = app.get(SagaParticipant);
  process.stdout.write(`READY ${participant.port}\n`);
  log('info', 'shipping rules', { unshippable_products: config.unshippableProducts });
  await signalled();
  log('info', 'stopping');
  await app.close();
  log('info', 'stopped');
  return 0;
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
    process.stderr.write(`${SERVICE_NAME}: ${describe(error)}\n`);
    process.exit(1);
  },
);

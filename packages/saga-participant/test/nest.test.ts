/**
 * `@saga/participant/nest`: the module from `forRoot` and from
 * `forRootAsync` (options from an injected config provider), the step an
 * injectable class with the participant's `Db` injected, serving on
 * bootstrap and stopping on `app.close()`.
 */
import 'reflect-metadata';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { ClientSession, Db } from 'mongodb';
import { applied, undone, type ActOutcome, type CompensateOutcome, type StepCall, type StepHandlers } from '../src/index.js';
import { InjectSagaDb, SagaParticipant, SagaParticipantModule } from '../src/nest/index.js';
import { failure, freshDatabase, mongoUri, StepClient, stepCall } from './harness.js';

@Injectable()
class Greeter {
  greeting(call: StepCall): string {
    return `hello ${call.order.customer_id}`;
  }
}

@Injectable()
class GreetingStep implements StepHandlers {
  constructor(
    @InjectSagaDb() private readonly db: Db,
    @Inject(Greeter) private readonly greeter: Greeter,
  ) {}

  async act(call: StepCall, session: ClientSession): Promise<ActOutcome> {
    await this.db.collection('greetings').insertOne({ request_id: call.request_id }, { session });
    return applied(this.greeter.greeting(call));
  }

  async compensate(call: StepCall, session: ClientSession): Promise<CompensateOutcome> {
    await this.db.collection('greetings').deleteOne({ request_id: call.request_id }, { session });
    return undone('goodbye');
  }
}

@Module({ providers: [Greeter], exports: [Greeter] })
class GreeterModule {}

const CONFIG = Symbol('CONFIG');

@Module({ providers: [{ provide: CONFIG, useFactory: () => ({ uri: mongoUri(), database: freshDatabase('nest_async') }) }], exports: [CONFIG] })
class ConfigModule {}

async function exercise(module: unknown): Promise<void> {
  const app = await NestFactory.createApplicationContext(module as never, { logger: false });
  await app.init();
  const participant = app.get(SagaParticipant);
  assert.ok(participant.port > 0, 'serving once bootstrapped');
  const client = new StepClient(participant.port);
  try {
    const call = stepCall();
    const reply = await client.act(call);
    assert.equal(reply.outcome, 'OUTCOME_APPLIED');
    assert.equal(reply.detail, 'hello alice');
    assert.equal((await client.act(call)).replayed, true);
    assert.equal(await participant.db.collection('greetings').countDocuments({ request_id: call.request_id }), 1);
    assert.equal((await client.compensate(call)).effect, 'COMPENSATION_EFFECT_UNDONE');
    assert.equal(await participant.db.collection('greetings').countDocuments({ request_id: call.request_id }), 0);
    await participant.db.dropDatabase();
  } finally {
    await app.close();
  }
  const after = await failure(client.act(stepCall(), { deadlineMs: 1000 }));
  assert.ok(after.code === 14 || after.code === 4, `not serving after app.close() (${after.code})`);
  client.close();
}

describe('SagaParticipantModule', () => {
  it('forRoot: serves the step on bootstrap and stops on close', async () => {
    @Module({
      imports: [
        SagaParticipantModule.forRoot({
          mongodbUri: mongoUri(),
          database: freshDatabase('nest_root'),
          listen: '127.0.0.1:0',
          logger: () => {},
          step: GreetingStep,
          imports: [GreeterModule],
        }),
      ],
    })
    class AppModule {}
    await exercise(AppModule);
  });

  it('forRootAsync: options from an injected provider', async () => {
    @Module({
      imports: [
        SagaParticipantModule.forRootAsync({
          imports: [ConfigModule, GreeterModule],
          inject: [CONFIG],
          useFactory: (config: { uri: string; database: string }) => ({
            mongodbUri: config.uri,
            database: config.database,
            listen: '127.0.0.1:0',
            logger: () => {},
          }),
          step: GreetingStep,
        }),
      ],
    })
    class AppModule {}
    await exercise(AppModule);
  });
});

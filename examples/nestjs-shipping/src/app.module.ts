/**
 * The NestJS module: the two gRPC controllers and what they are given (the
 * barrier over the MongoDB store, the token policy, the admission gate), built from the
 * configuration by `main.ts`.
 */
import { Module, type DynamicModule } from '@nestjs/common';
import { Admission } from './admission.js';
import { TokenPolicy } from './auth.js';
import { Barrier } from './barrier.js';
import type { Config } from './config.js';
import type { Store } from './db.js';
import { HistoryController, STORE } from './history.controller.js';
import { StepController } from './step.controller.js';

@Module({})
export class AppModule {
  static register(config: Config, store: Store): DynamicModule {
    return {
      module: AppModule,
      controllers: [StepController, HistoryController],
      providers: [
        { provide: STORE, useValue: store },
        { provide: Barrier, useValue: new Barrier(store, config.historyRetentionSeconds) },
        { provide: TokenPolicy, useValue: new TokenPolicy(config.serviceToken, config.adminToken) },
        { provide: Admission, useValue: new Admission(config.maxInFlight) },
      ],
    };
  }
}

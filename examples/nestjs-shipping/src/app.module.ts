/**
 * The NestJS wiring: the package's module serves the shipping step
 * (`participant.v1.SagaStepService` with the batch calls, and
 * `OperationHistoryService`) on application bootstrap and stops on
 * `app.close()`; the step gets the participant's `Db` and the products
 * seeded unshippable injected.
 */
import { Module, type DynamicModule } from '@nestjs/common';
import type { Logger } from '@saga/participant';
import { SagaParticipantModule } from '@saga/participant/nest';
import type { Config } from './config.js';
import { ShippingStep, UNSHIPPABLE_PRODUCTS } from './shipping.step.js';

/** The service's name in logs, and its MongoDB appName. */
export const SERVICE_NAME = 'nestjs-shipping';

@Module({})
export class AppModule {
  static register(config: Config, logger: Logger): DynamicModule {
    return {
      module: AppModule,
      imports: [
        SagaParticipantModule.forRoot({
          ...config.participant,
          ...(config.protoDir ? { protoDir: config.protoDir } : {}),
          serviceName: SERVICE_NAME,
          logger,
          step: ShippingStep,
          providers: [{ provide: UNSHIPPABLE_PRODUCTS, useValue: config.unshippableProducts }],
        }),
      ],
    };
  }
}

/**
 * `@saga/participant/nest`: the participant as a NestJS module. Nest is an
 * optional peer dependency: only this entry point imports it.
 *
 *     @Injectable()
 *     export class ShippingStep implements StepHandlers {
 *       constructor(@InjectSagaDb() private readonly db: Db) {}
 *       async act(call: StepCall, session: ClientSession) { ...; return applied(`shipment ${id}`, { id }); }
 *       async compensate(call: StepCall, session: ClientSession, { act }: CompensateContext) { ...; return undone(); }
 *     }
 *
 *     @Module({
 *       imports: [
 *         SagaParticipantModule.forRoot({ mongodbUri, database: 'shipping', listen: '127.0.0.1:50054', step: ShippingStep }),
 *         // or: SagaParticipantModule.forRootAsync({ imports: [ConfigModule], inject: [ConfigService],
 *         //        useFactory: (config) => ({ mongodbUri: config.get('MONGODB_URI'), database: 'shipping' }), step: ShippingStep }),
 *       ],
 *     })
 *     export class AppModule {}
 *
 * The module connects to MongoDB while Nest resolves its providers
 * (`SAGA_MONGO_CLIENT`, `SAGA_DB`, injectable into the step), opens the
 * participant (indexes, the step's `setup`) and starts serving gRPC on
 * application bootstrap, and stops serving and closes MongoDB on
 * application shutdown (`app.close()`, or `enableShutdownHooks()`). The
 * step is the class given as `step` (registered as a provider of the
 * module), or whatever you provide under `SAGA_STEP_HANDLERS` in
 * `providers`. `SagaParticipant` is injectable too (its `port`).
 */
import {
  Inject,
  Injectable,
  Module,
  type DynamicModule,
  type InjectionToken,
  type ModuleMetadata,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
  type OptionalFactoryDependency,
  type Provider,
  type Type,
} from '@nestjs/common';
import type { Db, MongoClient } from 'mongodb';
import { jsonLogger } from '../log.js';
import { connectMongo } from '../mongo.js';
import { SagaParticipant, type ParticipantOptions } from '../participant.js';
import type { StepHandlers } from '../step.js';

/** The module's options (`forRoot`'s, or what `forRootAsync`'s factory returns). */
export const SAGA_PARTICIPANT_OPTIONS = Symbol('SAGA_PARTICIPANT_OPTIONS');
/** The step's handlers: `act`, `compensate` (and optional `setup`, `listing`). */
export const SAGA_STEP_HANDLERS = Symbol('SAGA_STEP_HANDLERS');
/** The connected MongoClient. */
export const SAGA_MONGO_CLIENT = Symbol('SAGA_MONGO_CLIENT');
/** The participant's database (the history's and the step's collections). */
export const SAGA_DB = Symbol('SAGA_DB');

/** `@InjectSagaDb()`: the participant's `Db`. */
export const InjectSagaDb = (): ParameterDecorator & PropertyDecorator => Inject(SAGA_DB);
/** `@InjectSagaStep()`: the step's handlers. */
export const InjectSagaStep = (): ParameterDecorator & PropertyDecorator => Inject(SAGA_STEP_HANDLERS);

export interface SagaParticipantModuleOptions
  extends Omit<ParticipantOptions, 'handlers' | 'client' | 'db' | 'ownsClient' | 'mongodbUri' | 'database'> {
  mongodbUri: string;
  database: string;
  /** `host:port` to serve on (port 0: a free one, see `SagaParticipant.port`); `127.0.0.1:50054` by default. */
  listen?: string;
}

/** Where the step's handlers come from. */
interface StepSource {
  /** The step's class: registered as a provider and used as `SAGA_STEP_HANDLERS`. */
  step?: Type<StepHandlers>;
  /** Modules the step (or the async factory) needs. */
  imports?: ModuleMetadata['imports'];
  /** More providers of the module (e.g. `{ provide: SAGA_STEP_HANDLERS, useValue: handlers }`). */
  providers?: Provider[];
  /** Register the module globally (its exports visible everywhere). */
  global?: boolean;
}

export interface SagaParticipantModuleAsyncOptions extends StepSource {
  useFactory: (...args: any[]) => SagaParticipantModuleOptions | Promise<SagaParticipantModuleOptions>;
  inject?: (InjectionToken | OptionalFactoryDependency)[];
}

/** Starts serving on bootstrap and stops on shutdown. */
@Injectable()
export class SagaParticipantLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(
    @Inject(SagaParticipant) private readonly participant: SagaParticipant,
    @Inject(SAGA_PARTICIPANT_OPTIONS) private readonly options: SagaParticipantModuleOptions,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.participant.open();
    await this.participant.listen(this.options.listen ?? '127.0.0.1:50054');
  }

  async onApplicationShutdown(): Promise<void> {
    await this.participant.close();
  }
}

@Module({})
export class SagaParticipantModule {
  /** The participant from static options. */
  static forRoot(options: SagaParticipantModuleOptions & StepSource): DynamicModule {
    const { step, imports, providers, global, ...rest } = options;
    return SagaParticipantModule.build({ provide: SAGA_PARTICIPANT_OPTIONS, useValue: rest }, { step, imports, providers, global });
  }

  /** The participant from options a factory makes (with injected dependencies, e.g. a ConfigService). */
  static forRootAsync(options: SagaParticipantModuleAsyncOptions): DynamicModule {
    const { step, imports, providers, global, useFactory, inject } = options;
    return SagaParticipantModule.build(
      { provide: SAGA_PARTICIPANT_OPTIONS, useFactory, inject: inject ?? [] },
      { step, imports, providers, global },
    );
  }

  private static build(optionsProvider: Provider, source: StepSource): DynamicModule {
    const providers: Provider[] = [
      optionsProvider,
      {
        provide: SAGA_MONGO_CLIENT,
        inject: [SAGA_PARTICIPANT_OPTIONS],
        useFactory: (o: SagaParticipantModuleOptions): Promise<MongoClient> => {
          const serviceName = o.serviceName ?? 'saga-participant';
          return connectMongo(o.mongodbUri, {
            appName: serviceName,
            ...(o.startupWaitMs !== undefined ? { startupWaitMs: o.startupWaitMs } : {}),
            logger: o.logger ?? jsonLogger(serviceName),
          });
        },
      },
      {
        provide: SAGA_DB,
        inject: [SAGA_MONGO_CLIENT, SAGA_PARTICIPANT_OPTIONS],
        useFactory: (client: MongoClient, o: SagaParticipantModuleOptions): Db => client.db(o.database),
      },
      {
        provide: SagaParticipant,
        inject: [SAGA_PARTICIPANT_OPTIONS, SAGA_MONGO_CLIENT, SAGA_DB, SAGA_STEP_HANDLERS],
        useFactory: (o: SagaParticipantModuleOptions, client: MongoClient, db: Db, handlers: StepHandlers) => {
          const { listen: _listen, mongodbUri: _uri, database: _database, ...rest } = o;
          return new SagaParticipant({ ...rest, handlers, client, db, ownsClient: true });
        },
      },
      SagaParticipantLifecycle,
      ...(source.providers ?? []),
    ];
    if (source.step) {
      providers.push(source.step, { provide: SAGA_STEP_HANDLERS, useExisting: source.step });
    }
    return {
      module: SagaParticipantModule,
      global: source.global ?? false,
      imports: source.imports ?? [],
      providers,
      exports: [SagaParticipant, SAGA_DB, SAGA_MONGO_CLIENT, SAGA_STEP_HANDLERS],
    };
  }
}

export { SagaParticipant };

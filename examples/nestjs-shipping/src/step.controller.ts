/**
 * participant.v1.SagaStepService over NestJS's gRPC transport: a thin adapter
 * that checks the token, validates the call, admits it (admission.ts) and hands
 * it to the barrier with the call's deadline, logs one line, and turns failures into status codes
 * (errors.ts). The rules themselves live in barrier.ts.
 */
import { Controller, Inject } from '@nestjs/common';
import { GrpcMethod } from '@nestjs/microservices';
import type { Metadata, ServerUnaryCall } from '@grpc/grpc-js';
import { Admission } from './admission.js';
import { TokenPolicy } from './auth.js';
import { Barrier } from './barrier.js';
import { describe, toRpcException } from './errors.js';
import { log } from './log.js';
import { checkStepCall, type CheckedCall } from './validate.js';
import type { ActReply, CompensateReply, StepCall } from './wire.js';

@Controller()
export class StepController {
  constructor(
    @Inject(Barrier) private readonly barrier: Barrier,
    @Inject(TokenPolicy) private readonly tokens: TokenPolicy,
    @Inject(Admission) private readonly admission: Admission,
  ) {}

  @GrpcMethod('SagaStepService', 'Act')
  act(request: StepCall, metadata: Metadata, call: ServerUnaryCall<StepCall, ActReply>): Promise<ActReply> {
    return this.handle('act', request, metadata, call, (checked, deadline) => this.barrier.act(checked, deadline));
  }

  @GrpcMethod('SagaStepService', 'Compensate')
  compensate(
    request: StepCall,
    metadata: Metadata,
    call: ServerUnaryCall<StepCall, CompensateReply>,
  ): Promise<CompensateReply> {
    return this.handle('compensate', request, metadata, call, (checked, deadline) =>
      this.barrier.compensate(checked, deadline),
    );
  }

  private async handle<R extends ActReply | CompensateReply>(
    method: 'act' | 'compensate',
    request: StepCall,
    metadata: Metadata,
    call: ServerUnaryCall<StepCall, R>,
    run: (checked: CheckedCall, deadline: number) => Promise<R>,
  ): Promise<R> {
    const started = Date.now();
    const fields = {
      rpc: method,
      request_id: clip(request.request_id),
      saga_id: clip(request.saga_id),
      step: clip(request.step),
      attempt: request.attempt,
    };
    try {
      this.tokens.requireService(metadata);
      const checked = checkStepCall(request);
      const deadline = deadlineOf(call);
      const reply = await this.admission.run(deadline, () => run(checked, deadline));
      log('info', method, { ...fields, ...reply, duration_ms: Date.now() - started });
      return reply;
    } catch (error) {
      const exception = toRpcException(error);
      const { code } = exception.getError() as { code: number };
      log('warn', `${method} failed`, { ...fields, code, error: describe(error), duration_ms: Date.now() - started });
      throw exception;
    }
  }
}

/** The call's deadline in ms since the epoch (Infinity when the caller set none). */
export function deadlineOf(call: ServerUnaryCall<unknown, unknown>): number {
  const deadline = call.getDeadline();
  return deadline instanceof Date ? deadline.getTime() : deadline;
}

/** Ids as logged: a hostile 1 MB id is cut, not echoed. */
function clip(value: string): string {
  return value.length > 160 ? `${value.slice(0, 160)}…` : value;
}

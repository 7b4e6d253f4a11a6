/**
 * participant.v1.OperationHistoryService: what this participant recorded
 * under a request id, oldest first, for a person or the orchestrator's
 * console. Read-only; it takes the service or the admin token.
 */
import { Controller, Inject } from '@nestjs/common';
import { GrpcMethod } from '@nestjs/microservices';
import type { Metadata } from '@grpc/grpc-js';
import { TokenPolicy } from './auth.js';
import type { Store } from './db.js';
import { describe, toRpcException } from './errors.js';
import { log } from './log.js';
import type { OperationRecord } from './records.js';
import { checkRequestId } from './validate.js';
import type { ListOperationsRequest, ListOperationsResponse, Operation } from './wire.js';

/** The injection token of the MongoDB store. */
export const STORE = Symbol('Store');

@Controller()
export class HistoryController {
  constructor(
    @Inject(STORE) private readonly store: Store,
    @Inject(TokenPolicy) private readonly tokens: TokenPolicy,
  ) {}

  @GrpcMethod('OperationHistoryService', 'ListOperations')
  async listOperations(request: ListOperationsRequest, metadata: Metadata): Promise<ListOperationsResponse> {
    try {
      this.tokens.requireServiceOrAdmin(metadata);
      const requestId = checkRequestId(request.request_id);
      const records = await this.store.history
        .find({ request_id: requestId })
        .sort({ recorded_at: 1, _id: 1 })
        .toArray();
      return { operations: records.map(toOperation) };
    } catch (error) {
      const exception = toRpcException(error);
      log('warn', 'list_operations failed', { request_id: request.request_id.slice(0, 160), error: describe(error) });
      throw exception;
    }
  }
}

function toOperation(record: OperationRecord): Operation {
  const ms = record.recorded_at.getTime();
  return {
    request_id: record.request_id,
    kind: record.kind,
    status: record.status,
    amount: String(record.amount),
    detail: record.reason_code ? `${record.reason_code}: ${record.detail}` : record.detail,
    recorded_at: { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 },
    subject: record.params.order.order_id,
  };
}

/**
 * participant.v1.OperationHistoryService: what the participant recorded
 * under a request id, oldest first, for a person or the orchestrator's
 * console (`kind` act or compensate, `status` the record's word, `amount`
 * and `subject` from the step's listing, `detail` — a refusal's as
 * `<reason_code>: <detail>` —, `recorded_at`). The two records a null
 * compensation writes in one transaction come in either order.
 */
import type { Collection } from 'mongodb';
import type { OperationRecord } from './records.js';
import type { Operation } from './wire.js';

/** Every record under `requestId`, oldest first. */
export async function listOperations(history: Collection<OperationRecord>, requestId: string): Promise<Operation[]> {
  const records = await history.find({ request_id: requestId }).sort({ recorded_at: 1, _id: 1 }).toArray();
  return records.map(toOperation);
}

export function toOperation(record: OperationRecord): Operation {
  const ms = record.recorded_at.getTime();
  const detail =
    record.reason_code && record.detail ? `${record.reason_code}: ${record.detail}` : record.reason_code || record.detail;
  return {
    request_id: record.request_id,
    kind: record.kind,
    status: record.status,
    amount: String(record.amount ?? '0'),
    detail,
    recorded_at: { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 },
    subject: String(record.subject ?? ''),
  };
}

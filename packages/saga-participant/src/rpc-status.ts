/**
 * The gRPC rich error model (`google.rpc.Status` with `google.rpc.ErrorInfo`
 * and `google.rpc.BadRequest` details), encoded and decoded by hand: four
 * small messages, so no generated code and no extra dependency. What a
 * failed call carries in its `grpc-status-details-bin` trailer, and what a
 * failed call of a batch carries in `CallError.details`. Every gRPC library
 * decodes it (`tonic_types::StatusExt`, grpcio-status, …); `decodeStatus`
 * is the same for Node clients and tests.
 */

/** google.rpc.ErrorInfo: a stable reason within a domain, and facts. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/** One google.rpc.BadRequest.FieldViolation. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** google.rpc.Status, its details decoded where they are one of the two kinds above. */
export interface RpcStatus {
  code: number;
  message: string;
  errorInfo?: ErrorInfo;
  badRequest?: FieldViolation[];
  /** Details of other types, left encoded. */
  other: { typeUrl: string; value: Buffer }[];
}

export const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
export const BAD_REQUEST_TYPE = 'type.googleapis.com/google.rpc.BadRequest';

/** Encodes a google.rpc.Status with the given details. */
export function encodeStatus(
  code: number,
  message: string,
  details: { errorInfo?: ErrorInfo; badRequest?: FieldViolation[] } = {},
): Buffer {
  const parts: Buffer[] = [];
  if (code !== 0) parts.push(varintField(1, code));
  if (message !== '') parts.push(bytesField(2, Buffer.from(message, 'utf8')));
  if (details.errorInfo) parts.push(bytesField(3, any(ERROR_INFO_TYPE, encodeErrorInfo(details.errorInfo))));
  if (details.badRequest) parts.push(bytesField(3, any(BAD_REQUEST_TYPE, encodeBadRequest(details.badRequest))));
  return Buffer.concat(parts);
}

/** Decodes a google.rpc.Status (throws on malformed bytes). */
export function decodeStatus(bytes: Uint8Array): RpcStatus {
  const status: RpcStatus = { code: 0, message: '', other: [] };
  for (const field of fields(Buffer.from(bytes))) {
    if (field.number === 1 && typeof field.value === 'number') status.code = field.value;
    else if (field.number === 2 && Buffer.isBuffer(field.value)) status.message = field.value.toString('utf8');
    else if (field.number === 3 && Buffer.isBuffer(field.value)) {
      let typeUrl = '';
      let value: Buffer = Buffer.alloc(0);
      for (const inner of fields(field.value)) {
        if (inner.number === 1 && Buffer.isBuffer(inner.value)) typeUrl = inner.value.toString('utf8');
        if (inner.number === 2 && Buffer.isBuffer(inner.value)) value = inner.value;
      }
      if (typeUrl === ERROR_INFO_TYPE) status.errorInfo = decodeErrorInfo(value);
      else if (typeUrl === BAD_REQUEST_TYPE) status.badRequest = decodeBadRequest(value);
      else status.other.push({ typeUrl, value });
    }
  }
  return status;
}

function encodeErrorInfo(info: ErrorInfo): Buffer {
  const parts = [stringField(1, info.reason), stringField(2, info.domain)];
  for (const key of Object.keys(info.metadata).sort()) {
    parts.push(bytesField(3, Buffer.concat([stringField(1, key), stringField(2, info.metadata[key] ?? '')])));
  }
  return Buffer.concat(parts);
}

function decodeErrorInfo(bytes: Buffer): ErrorInfo {
  const info: ErrorInfo = { reason: '', domain: '', metadata: {} };
  for (const field of fields(bytes)) {
    if (!Buffer.isBuffer(field.value)) continue;
    if (field.number === 1) info.reason = field.value.toString('utf8');
    if (field.number === 2) info.domain = field.value.toString('utf8');
    if (field.number === 3) {
      let key = '';
      let value = '';
      for (const entry of fields(field.value)) {
        if (entry.number === 1 && Buffer.isBuffer(entry.value)) key = entry.value.toString('utf8');
        if (entry.number === 2 && Buffer.isBuffer(entry.value)) value = entry.value.toString('utf8');
      }
      info.metadata[key] = value;
    }
  }
  return info;
}

function encodeBadRequest(violations: FieldViolation[]): Buffer {
  return Buffer.concat(
    violations.map((v) => bytesField(1, Buffer.concat([stringField(1, v.field), stringField(2, v.description)]))),
  );
}

function decodeBadRequest(bytes: Buffer): FieldViolation[] {
  const violations: FieldViolation[] = [];
  for (const field of fields(bytes)) {
    if (field.number !== 1 || !Buffer.isBuffer(field.value)) continue;
    const violation: FieldViolation = { field: '', description: '' };
    for (const inner of fields(field.value)) {
      if (inner.number === 1 && Buffer.isBuffer(inner.value)) violation.field = inner.value.toString('utf8');
      if (inner.number === 2 && Buffer.isBuffer(inner.value)) violation.description = inner.value.toString('utf8');
    }
    violations.push(violation);
  }
  return violations;
}

function any(typeUrl: string, value: Buffer): Buffer {
  return Buffer.concat([stringField(1, typeUrl), bytesField(2, value)]);
}

function varint(value: number): Buffer {
  const out: number[] = [];
  let v = value >>> 0;
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  out.push(v);
  return Buffer.from(out);
}

function varintField(number: number, value: number): Buffer {
  return Buffer.concat([varint((number << 3) | 0), varint(value)]);
}

function bytesField(number: number, value: Buffer): Buffer {
  return Buffer.concat([varint((number << 3) | 2), varint(value.length), value]);
}

function stringField(number: number, value: string): Buffer {
  return bytesField(number, Buffer.from(value, 'utf8'));
}

interface Field {
  number: number;
  value: number | Buffer;
}

/** The fields of one message: varints as numbers, length-delimited as buffers; others skipped. */
function fields(bytes: Buffer): Field[] {
  const out: Field[] = [];
  let at = 0;
  const readVarint = (): number => {
    let result = 0;
    let shift = 0;
    for (;;) {
      if (at >= bytes.length) throw new Error('truncated varint');
      const byte = bytes[at++]!;
      if (shift < 28) result |= (byte & 0x7f) << shift;
      else result += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return result;
      shift += 7;
      if (shift > 63) throw new Error('varint too long');
    }
  };
  while (at < bytes.length) {
    const tag = readVarint();
    const number = Math.floor(tag / 8);
    const wire = tag & 7;
    if (wire === 0) out.push({ number, value: readVarint() });
    else if (wire === 2) {
      const length = readVarint();
      if (at + length > bytes.length) throw new Error('truncated field');
      out.push({ number, value: bytes.subarray(at, at + length) });
      at += length;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

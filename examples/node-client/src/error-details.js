/**
 * The machine-readable part of a failed call: the gRPC rich error model's
 * `google.rpc.Status` that the orchestrator sends in the
 * `grpc-status-details-bin` trailer, decoded here — its
 * `google.rpc.ErrorInfo` (a stable `reason` such as `REQUEST_ID_REUSED`,
 * `SAGA_NOT_FOUND`, `CLIENT_TOKEN_REQUIRED`, with `domain` and `metadata`)
 * and its `google.rpc.BadRequest` (every bad field). A program decides on
 * these and the status code, never on the message, which is for people.
 *
 * Why a small decoder of its own: the three messages are a handful of
 * fields, and reading them needs no generated code, no copy of Google's
 * protos and no dependency beyond @grpc/grpc-js.
 */

/**
 * `{ reason, domain, metadata, fields, violations }` of `error` (nulls and
 * empties when it has none); `violations` are `{ field, description }`.
 */
export function errorDetails(error) {
  const details = { reason: null, domain: null, metadata: {}, fields: [], violations: [] };
  const raw = error?.metadata?.get?.('grpc-status-details-bin')?.[0];
  if (!Buffer.isBuffer(raw)) return details;
  try {
    for (const [number, any] of fieldsOf(raw)) {
      if (number === 3) readAny(any, details);
    }
  } catch {
    // Details that do not decode: the status code and the message remain.
  }
  return details;
}

function readAny(any, details) {
  let typeUrl = '';
  let value = null;
  for (const [number, bytes] of fieldsOf(any)) {
    if (number === 1) typeUrl = bytes.toString('utf8');
    if (number === 2) value = bytes;
  }
  if (value === null) return;
  if (typeUrl.endsWith('/google.rpc.ErrorInfo')) {
    for (const [number, bytes] of fieldsOf(value)) {
      if (number === 1) details.reason = bytes.toString('utf8');
      if (number === 2) details.domain = bytes.toString('utf8');
      if (number === 3) {
        const entry = Object.fromEntries([...fieldsOf(bytes)].map(([n, b]) => [n, b.toString('utf8')]));
        details.metadata[entry[1] ?? ''] = entry[2] ?? '';
      }
    }
  } else if (typeUrl.endsWith('/google.rpc.BadRequest')) {
    for (const [number, violation] of fieldsOf(value)) {
      if (number !== 1) continue;
      const parts = Object.fromEntries([...fieldsOf(violation)].map(([n, b]) => [n, b.toString('utf8')]));
      details.fields.push(parts[1] ?? '');
      details.violations.push({ field: parts[1] ?? '', description: parts[2] ?? '' });
    }
  }
}

/** The length-delimited fields of a protobuf message as `[number, bytes]`; others are skipped. */
function* fieldsOf(buffer) {
  let at = 0;
  const varint = () => {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      if (at >= buffer.length || shift > 49) throw new Error('truncated varint');
      const byte = buffer[at++];
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) return value;
    }
  };
  while (at < buffer.length) {
    const key = varint();
    const [number, wireType] = [Math.floor(key / 8), key % 8];
    if (wireType === 0) varint();
    else if (wireType === 1) at += 8;
    else if (wireType === 5) at += 4;
    else if (wireType === 2) {
      const length = varint();
      if (at + length > buffer.length) throw new Error('truncated field');
      yield [number, buffer.subarray(at, at + length)];
      at += length;
    } else throw new Error(`wire type ${wireType}`);
  }
}

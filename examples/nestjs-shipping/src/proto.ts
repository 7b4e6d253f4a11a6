/**
 * Where the participant contract comes from: the repository's own .proto files
 * (`proto/proto`), loaded as they are, never a copy, so this example can only
 * drift from the contract by failing to start. The include path is the proto
 * root, so `import "participant/v1/participant.proto"` resolves as it does for
 * the Rust services.
 */
import { fileURLToPath } from 'node:url';
import path from 'node:path';

/** The example's own directory (this file is compiled to dist/src/). */
export const PACKAGE_DIR = fileURLToPath(new URL('../../', import.meta.url));

/** The repository's proto root; `PROTO_DIR` overrides it for a checkout elsewhere. */
export function protoDir(): string {
  return process.env.PROTO_DIR ?? path.resolve(PACKAGE_DIR, '../../proto/proto');
}

/** The files this participant serves, relative to the proto root. */
export const PARTICIPANT_PROTOS = ['participant/v1/step.proto', 'participant/v1/participant.proto'];

/**
 * How messages map to JavaScript: field names as in the .proto (snake_case),
 * int64 as decimal strings (no precision lost on money), enums by name, every
 * field present with its default.
 */
export function loaderOptions(includeDir: string = protoDir()) {
  return {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [includeDir],
  };
}

/**
 * Where the contract comes from: the package's own copies of the
 * repository's `participant/v1/step.proto` and `participant.proto` (copied
 * at build and pack time, so the tarball is self-contained), loaded as they
 * are with `@grpc/proto-loader`.
 */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The package's directory (this file is compiled to dist/src/). */
export const PACKAGE_DIR = fileURLToPath(new URL('../../', import.meta.url));

/** The proto root shipped with the package. */
export const PROTO_DIR = path.join(PACKAGE_DIR, 'proto');

/** The files served, relative to the proto root. */
export const PARTICIPANT_PROTOS = ['participant/v1/step.proto', 'participant/v1/participant.proto'];

/**
 * How messages map to JavaScript: field names as in the .proto (snake_case),
 * int64 as decimal strings, enums by name, every field present with its
 * default, `oneof` names set (ActResult.result).
 */
export function loaderOptions(includeDir: string = PROTO_DIR): protoLoader.Options {
  return {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [includeDir],
  };
}

/** The participant.v1 package definition (services and messages). */
export interface ParticipantPackage {
  SagaStepService: grpc.ServiceClientConstructor;
  OperationHistoryService: grpc.ServiceClientConstructor;
}

/** Loads participant.v1 from `protoDir` (the package's copies by default). */
export function loadParticipantPackage(protoDir: string = PROTO_DIR): ParticipantPackage {
  const definition = protoLoader.loadSync(PARTICIPANT_PROTOS, loaderOptions(protoDir));
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    participant: { v1: ParticipantPackage };
  };
  return loaded.participant.v1;
}

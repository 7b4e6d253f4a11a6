/**
 * NestJS's gRPC transport (`ServerGrpc`, the server behind
 * `Transport.GRPC`), told to say which port it bound. The stock transport
 * binds and forgets the port, so `SHIPPING_LISTEN=127.0.0.1:0` (a free port,
 * as tests and scripts use) could not be reported; this subclass only
 * replaces the bind, keeping everything else (proto loading, routing to
 * @GrpcMethod handlers, graceful shutdown) as NestJS does it.
 */
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { ServerGrpc, type GrpcOptions } from '@nestjs/microservices';
import { PARTICIPANT_PROTOS, loaderOptions } from './proto.js';

/** Requests above this are refused by gRPC before any handler runs. */
const MAX_RECEIVE_BYTES = 1024 * 1024;

export class ReportingGrpcServer extends ServerGrpc {
  /** The bound port, once listening. */
  port = 0;

  constructor(private readonly address: string) {
    super(grpcOptions(address));
  }

  override async createClient(): Promise<Server> {
    const server = new Server({ 'grpc.max_receive_message_length': MAX_RECEIVE_BYTES });
    this.port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(this.address, ServerCredentials.createInsecure(), (error, port) =>
        error ? reject(error) : resolve(port),
      ),
    );
    return server;
  }
}

/** The transport's options: both participant.v1 services, from the repository's protos. */
export function grpcOptions(address: string): GrpcOptions['options'] {
  return {
    url: address,
    package: 'participant.v1',
    protoPath: PARTICIPANT_PROTOS,
    loader: loaderOptions(),
    gracefulShutdown: true,
  };
}

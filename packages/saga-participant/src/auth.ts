/**
 * The service token (docs/participant-protocol.md, "The service token"):
 * with a service token configured, Act, Compensate and the batch calls need
 * gRPC metadata `authorization: Bearer <token>`, checked before anything is
 * read or stored; ListOperations takes the service token or the admin
 * token. Tokens are compared in constant time (as SHA-256 digests, so their
 * lengths do not leak either).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Metadata } from '@grpc/grpc-js';
import { READ_TOKEN_REQUIRED, SERVICE_TOKEN_REQUIRED, Unauthenticated } from './errors.js';

export class TokenPolicy {
  constructor(
    private readonly serviceToken: string | undefined,
    private readonly adminToken: string | undefined,
  ) {
    for (const [name, token] of [
      ['serviceToken', serviceToken],
      ['adminToken', adminToken],
    ] as const) {
      if (token !== undefined && (token === '' || /\s/.test(token))) {
        throw new TypeError(`${name}: a token must be non-empty and hold no whitespace`);
      }
    }
  }

  /** Whether Act and Compensate need a token. */
  get serviceTokenRequired(): boolean {
    return this.serviceToken !== undefined;
  }

  /** For Act, Compensate and the batches: the service token, when one is configured. */
  requireService(metadata: Metadata): void {
    if (this.serviceToken === undefined) return;
    if (!matches(bearer(metadata), this.serviceToken)) {
      throw new Unauthenticated('this call needs authorization: Bearer <service token>', SERVICE_TOKEN_REQUIRED);
    }
  }

  /** For ListOperations: the service or the admin token, when either is configured. */
  requireServiceOrAdmin(metadata: Metadata): void {
    const accepted = [this.serviceToken, this.adminToken].filter((t): t is string => t !== undefined);
    if (accepted.length === 0) return;
    const presented = bearer(metadata);
    // Every configured token is compared, so the time taken does not say which one matched.
    const results = accepted.map((token) => matches(presented, token));
    if (!results.includes(true)) {
      throw new Unauthenticated('ListOperations needs authorization: Bearer <service or admin token>', READ_TOKEN_REQUIRED);
    }
  }
}

function bearer(metadata: Metadata): string | undefined {
  const value = metadata.get('authorization')[0];
  if (typeof value !== 'string') return undefined;
  const match = /^Bearer (\S+)$/.exec(value.trim());
  return match?.[1];
}

function matches(presented: string | undefined, expected: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();
  const equal = timingSafeEqual(digest(presented ?? ''), digest(expected));
  return presented !== undefined && equal;
}

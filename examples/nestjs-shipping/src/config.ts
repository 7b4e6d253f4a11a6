/**
 * The service's configuration, from the environment only. The package reads
 * its own settings (`MONGODB_URI`, `MONGODB_DATABASE`, `SERVICE_TOKEN`,
 * `ADMIN_TOKEN`, `HISTORY_RETENTION_SECONDS`, `MIN_HISTORY_RETENTION_SECONDS`)
 * under the names given here for the address and the in-flight bound; this
 * adds the shipping rules' one setting. A bad value is one `ConfigError`
 * naming the variable, and the service does not start.
 */
import { participantConfigFromEnv, type EnvConfig } from '@saga/participant';

export interface Config {
  /** The participant's settings (`SHIPPING_LISTEN`, `SHIPPING_MAX_IN_FLIGHT`, MongoDB, tokens, retention). */
  participant: EnvConfig;
  /** Product ids seeded into `shipping_rules` as unshippable at start-up (`UNSHIPPABLE_PRODUCTS`). */
  unshippableProducts: string[];
  /** `PROTO_DIR`: another proto root than the package's own copy of the contract. */
  protoDir: string | undefined;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    participant: participantConfigFromEnv(env, {
      listen: 'SHIPPING_LISTEN',
      maxInFlight: 'SHIPPING_MAX_IN_FLIGHT',
      defaultListen: '127.0.0.1:50054',
      defaultDatabase: 'shipping',
    }),
    unshippableProducts: (env.UNSHIPPABLE_PRODUCTS ?? '')
      .split(',')
      .map((id) => id.trim())
      .filter((id) => id.length > 0),
    protoDir: env.PROTO_DIR || undefined,
  };
}

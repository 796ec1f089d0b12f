import fs from 'node:fs';
import { Connection, type TLSConfig } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { BadInputError } from '../core/errors.ts';
import { temporalAddress, type Environment } from '../config/environment.ts';

/**
 * How every client and worker reaches the Temporal frontend: the address, TLS (server CA, mTLS client
 * certificate, server name) and an API key, all from the environment (docs/operations.md "Connecting to a
 * Temporal cluster"). The key and the files are read when a connection is made, so a rotated key or
 * certificate is picked up by the next connection; nothing here is logged or put in a payload.
 */

export interface TemporalConnectionSettings {
  address: string;
  tls?: TLSConfig;
  apiKey?: string;
}

function pemFile(variable: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new BadInputError(`${variable}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
}

export function temporalConnectionSettings(env: Environment): TemporalConnectionSettings {
  const ca = env.TBT_TEMPORAL_TLS_CA_FILE;
  const cert = env.TBT_TEMPORAL_TLS_CERT_FILE;
  const key = env.TBT_TEMPORAL_TLS_KEY_FILE;
  if (Boolean(cert) !== Boolean(key))
    throw new BadInputError('TBT_TEMPORAL_TLS_CERT_FILE and TBT_TEMPORAL_TLS_KEY_FILE: set both or neither (mTLS)');
  const apiKey = env.TBT_TEMPORAL_API_KEY || undefined;
  const wanted = env.TBT_TEMPORAL_TLS === 'true' || (env.TBT_TEMPORAL_TLS === '' && Boolean(ca || cert || apiKey));
  if (!wanted) {
    if (ca || cert) throw new BadInputError('TBT_TEMPORAL_TLS=false, but TLS files are set: unset them or the flag');
    return { address: temporalAddress(env), apiKey };
  }
  const tls: TLSConfig = {};
  if (ca) tls.serverRootCACertificate = pemFile('TBT_TEMPORAL_TLS_CA_FILE', ca);
  if (cert && key)
    tls.clientCertPair = {
      crt: pemFile('TBT_TEMPORAL_TLS_CERT_FILE', cert),
      key: pemFile('TBT_TEMPORAL_TLS_KEY_FILE', key),
    };
  if (env.TBT_TEMPORAL_TLS_SERVER_NAME) tls.serverNameOverride = env.TBT_TEMPORAL_TLS_SERVER_NAME;
  return { address: temporalAddress(env), tls, apiKey };
}

/** A client connection (CLI, benchmarks, scripts). */
export function connectTemporalClient(env: Environment, connectTimeoutMs?: number): Promise<Connection> {
  return Connection.connect({ ...temporalConnectionSettings(env), connectTimeout: connectTimeoutMs });
}

/** A worker connection (the four workers). */
export function connectTemporalWorker(env: Environment): Promise<NativeConnection> {
  return NativeConnection.connect(temporalConnectionSettings(env));
}

import pino, { type DestinationStream, type Logger } from 'pino';
import { REDACTED, redactSecretsInText } from '../core/secret-text.ts';

/**
 * The one pino logger of a service (workers, set-up): fields that hold secrets are censored by path, and
 * every message and error text is scrubbed of URL passwords and tokens (a malformed DATABASE_URL used to
 * reach the crash log whole).
 */

const secretKeys = [
  'password',
  'PGPASSWORD',
  'apiKey',
  'api_key',
  'apikey',
  'API_KEY',
  'token',
  'secret',
  'authorization',
  'Authorization',
  'connectionString',
  'controlUrl',
  'databaseUrl',
  'DATABASE_URL',
  'agentUrl',
  'readerUrl',
  'agentPassword',
  'readerPassword',
];
/** Censored at the top level and up to two levels down (pino paths name their depth). */
export const redactedPaths = secretKeys.flatMap((k) => [k, `*.${k}`, `*.*.${k}`]);

function scrubError(err: unknown): Record<string, unknown> {
  const s = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s)) {
    out[k] = typeof v === 'string' ? redactSecretsInText(v) : secretKeys.includes(k) ? REDACTED : v;
  }
  return out;
}

/** String values of a log object scrubbed like messages (plain objects and arrays, `depth` levels down). */
function scrubStrings(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return redactSecretsInText(value);
  if (depth <= 0 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => scrubStrings(v, depth - 1));
  if (Object.getPrototypeOf(value) !== Object.prototype) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubStrings(v, depth - 1)]));
}

export function createServiceLogger(
  name: string,
  base: Record<string, unknown> = {},
  destination?: DestinationStream,
): Logger {
  const options: pino.LoggerOptions = {
    name,
    base: { pid: process.pid, ...base },
    redact: { paths: redactedPaths, censor: REDACTED },
    serializers: { err: scrubError },
    formatters: { log: (object) => scrubStrings(object, 3) as Record<string, unknown> },
    hooks: {
      logMethod(args, method) {
        method.apply(
          this,
          args.map((a) => (typeof a === 'string' ? redactSecretsInText(a) : a)) as Parameters<typeof method>,
        );
      },
    },
  };
  return destination ? pino(options, destination) : pino(options);
}

/** A service's last words: the error, scrubbed, then exit 1 (written synchronously before the exit). */
export function exitWithCrash(log: Logger, what: string, err: unknown): never {
  log.fatal({ err }, `${what} failed`);
  process.exit(1);
}

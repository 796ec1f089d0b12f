import { pathToFileURL } from 'node:url';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes.js';
import { msToTs } from '@temporalio/common/lib/time.js';
import type pino from 'pino';
import { readEnvironment, searchAttributes, temporalAddress, type Environment } from '../config/environment.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';

/**
 * One-shot set-up of a deployment (the compose `setup` service; safe to run again at any time): the Temporal
 * namespace, our search attributes on it, and the control database (roles and tables). The local dev server
 * gets its search attributes from `tbt up`; a Temporal cluster gets them here.
 */

/** Closed workflows stay visible in the UI this long; campaigns run for days. */
const namespaceRetention = '30 days';
const grpcNotFound = 5;
const grpcAlreadyExists = 6;

export interface SetupResult {
  namespaceCreated: boolean;
  searchAttributesAdded: string[];
}

type Log = Pick<pino.Logger, 'info' | 'warn'>;

function grpcCode(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'number'
    ? err.code
    : undefined;
}

async function retry<T>(
  what: string,
  deadline: number,
  log: Log,
  fn: () => Promise<T>,
  retryable: (err: unknown) => boolean = () => true,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!retryable(err)) throw err;
      if (Date.now() > deadline) throw new Error(`${what}: still failing after ${attempt} attempts`, { cause: err });
      log.warn({ attempt, err: err instanceof Error ? err.message : String(err) }, `${what}: not ready, retrying`);
      await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * attempt)));
    }
  }
}

async function ensureNamespace(connection: Connection, namespace: string): Promise<boolean> {
  try {
    await connection.workflowService.describeNamespace({ namespace });
    return false;
  } catch (err) {
    if (grpcCode(err) !== grpcNotFound) throw err;
  }
  try {
    await connection.workflowService.registerNamespace({
      namespace,
      workflowExecutionRetentionPeriod: msToTs(namespaceRetention),
    });
  } catch (err) {
    if (grpcCode(err) !== grpcAlreadyExists) throw err;
    return false;
  }
  return true;
}

async function ensureSearchAttributes(connection: Connection, namespace: string, log: Log): Promise<string[]> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const missing: Record<string, number> = {};
  for (const [name, type] of Object.entries(searchAttributes)) {
    const wanted = encodeSearchAttributeIndexedValueType(type.toUpperCase() as 'KEYWORD' | 'INT' | 'BOOL')!;
    const existing = customAttributes?.[name];
    if (existing === undefined || existing === null) missing[name] = wanted;
    else if (existing !== wanted)
      throw new Error(
        `search attribute ${name} exists on namespace ${namespace} with another type (${existing}); wanted ${type}`,
      );
  }
  const names = Object.keys(missing);
  if (names.length === 0) return [];
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
  } catch (err) {
    if (grpcCode(err) !== grpcAlreadyExists) throw err;
  }
  log.info({ namespace, added: names }, 'search attributes registered');
  return names;
}

/** Idempotent: a second run changes nothing and reports nothing added. */
export async function setUpDeployment(env: Environment, log: Log, timeoutMs = 5 * 60_000): Promise<SetupResult> {
  const deadline = Date.now() + timeoutMs;
  const address = temporalAddress(env);
  const connection = await retry(`Temporal at ${address}`, deadline, log, async () => {
    const c = await Connection.connect({ address, connectTimeout: 5000 });
    try {
      await c.workflowService.getSystemInfo({});
      return c;
    } catch (err) {
      await c.close();
      throw err;
    }
  });
  try {
    const namespace = env.TBT_TEMPORAL_NAMESPACE;
    const namespaceCreated = await ensureNamespace(connection, namespace);
    // The operator service reads namespaces from a cache that learns of a new one some seconds later.
    const searchAttributesAdded = await retry(
      `search attributes on ${namespace}`,
      deadline,
      log,
      () => ensureSearchAttributes(connection, namespace, log),
      (err) => grpcCode(err) === grpcNotFound,
    );
    await retry('control database', deadline, log, () => ensureControlDatabase(env));
    return { namespaceCreated, searchAttributesAdded };
  } finally {
    await connection.close();
  }
}

async function run(): Promise<void> {
  const env = readEnvironment();
  const log = createServiceLogger('setup');
  const result = await setUpDeployment(env, log);
  log.info({ namespace: env.TBT_TEMPORAL_NAMESPACE, ...result }, 'deployment ready');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run().catch((err: unknown) => exitWithCrash(createServiceLogger('setup'), 'setup', err));
}

import { pathToFileURL } from 'node:url';
import type { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time.js';
import type pino from 'pino';
import { databaseUrl, readEnvironment, temporalAddress, type Environment } from '../config/environment.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { ensureRestrictedAdmin, readSetupEnvironment } from './control-db-admin.ts';
import { ensureSearchAttributes, grpcAlreadyExists, grpcCode, grpcNotFound } from '../infra/search-attributes.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';

/**
 * One-shot set-up of a deployment (the compose `setup` service; safe to run again at any time): the Temporal
 * namespace, our search attributes on it, and the control database (roles and tables). The local dev server
 * gets its search attributes from `tbt up`; a Temporal cluster gets them here. Given the control server's
 * superuser URL (compose passes it to this service alone), it first makes DATABASE_URL's role the workers'
 * non-superuser admin (docker/control-db-admin.ts).
 */

/** Closed workflows stay visible in the UI this long; campaigns run for days. */
const namespaceRetention = '30 days';

export interface SetupResult {
  namespaceCreated: boolean;
  searchAttributesAdded: string[];
}

type Log = Pick<pino.Logger, 'info' | 'warn'>;

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

/** Idempotent: a second run changes nothing and reports nothing added. */
export async function setUpDeployment(
  env: Environment,
  log: Log,
  timeoutMs = 5 * 60_000,
  superuserUrl?: string,
): Promise<SetupResult> {
  const deadline = Date.now() + timeoutMs;
  const address = temporalAddress(env);
  const connection = await retry(`Temporal at ${address}`, deadline, log, async () => {
    const c = await connectTemporalClient(env, 5000);
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
      async () => {
        const added = await ensureSearchAttributes(connection, namespace);
        if (added.length > 0) log.info({ namespace, added }, 'search attributes registered');
        return added;
      },
      (err) => grpcCode(err) === grpcNotFound,
    );
    if (superuserUrl)
      await retry('control database admin', deadline, log, () => ensureRestrictedAdmin(superuserUrl, databaseUrl(env)));
    await retry('control database', deadline, log, () => ensureControlDatabase(env));
    return { namespaceCreated, searchAttributesAdded };
  } finally {
    await connection.close();
  }
}

async function run(): Promise<void> {
  const env = readEnvironment();
  const { TBT_CONTROL_DB_SUPERUSER_URL } = readSetupEnvironment();
  const log = createServiceLogger('setup');
  const result = await setUpDeployment(env, log, undefined, TBT_CONTROL_DB_SUPERUSER_URL);
  log.info({ namespace: env.TBT_TEMPORAL_NAMESPACE, ...result }, 'deployment ready');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run().catch((err: unknown) => exitWithCrash(createServiceLogger('setup'), 'setup', err));
}

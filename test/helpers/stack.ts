import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, Runtime, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import path from 'node:path';
import { databaseUrl, readEnvironment, repoRoot, temporalAddress } from '../../config/environment.ts';
import { ensureControlDatabase } from '../../infra/control-database.ts';
import { SandboxPool } from '../../sandbox/sandbox-pool.ts';

/**
 * The real local stack for tests: the servers `scripts/test.sh` started with `tbt up` (or the ones
 * TBT_TEMPORAL_ADDRESS / DATABASE_URL point at). Nothing here starts a fake.
 */

export const env = readEnvironment();

Runtime.install({ logger: new DefaultLogger('WARN') });
export const controlUrl = databaseUrl(env);

export async function controlReady(): Promise<string> {
  await ensureControlDatabase(env);
  return controlUrl;
}

export function newPool(
  options: { warm?: number; leaseMs?: number; orphanMinAgeMs?: number; controlUrl?: string; recycle?: boolean } = {},
): SandboxPool {
  return new SandboxPool({
    controlUrl: options.controlUrl ?? controlUrl,
    agentPassword: env.TBT_AGENT_DB_PASSWORD,
    readerPassword: env.TBT_READER_DB_PASSWORD,
    warm: options.warm ?? 0,
    leaseMs: options.leaseMs,
    orphanMinAgeMs: options.orphanMinAgeMs,
    recycle: options.recycle,
  });
}

export async function temporalClient(): Promise<{ client: Client; connection: Connection }> {
  const connection = await Connection.connect({ address: temporalAddress(env) });
  return { client: new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE }), connection };
}

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;
/** Workflow code bundled once per test process. */
export function workflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundle ??= bundleWorkflowCode({
    workflowsPath: path.join(repoRoot, 'workflows', 'index.ts'),
    logger: {
      log: () => undefined,
      info: () => undefined,
      warn: () => undefined,
      error: console.error,
      debug: () => undefined,
      trace: () => undefined,
    } as never,
  });
  return bundle;
}

export const fixtures = path.join(repoRoot, 'test', 'fixtures');

import path from 'node:path';
import { NativeConnection, Worker } from '@temporalio/worker';
import { databaseUrl, readEnvironment, repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { createSmokeActivities } from '../activities/smoke-activities.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { installTemporalLogger } from '../infra/temporal-pino-logger.ts';

/**
 * Orchestrator worker: runs the (deterministic) workflows, and the stack's smoke check. The campaign's bookkeeping
 * activities run in the bookkeeping worker (workers/bookkeeping-worker.ts), a process of its own.
 */

const log = createServiceLogger('orchestrator-worker');
// Activity and worker logs (Temporal's `log`) go through this logger and its redaction.
installTemporalLogger(log);

async function run(): Promise<void> {
  const env = readEnvironment();
  const controlUrl = databaseUrl(env);
  await ensureControlDatabase(env);
  const connection = await NativeConnection.connect({ address: temporalAddress(env) });
  try {
    const worker = await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: taskQueues(env).orchestrator,
      workflowsPath: path.join(repoRoot, 'workflows', 'index.ts'),
      activities: createSmokeActivities(controlUrl),
      shutdownGraceTime: '10s',
    });
    log.info({ taskQueue: taskQueues(env).orchestrator }, 'orchestrator worker started');
    await worker.run();
  } finally {
    await connection.close();
  }
}

run().catch((err: unknown) => exitWithCrash(log, 'orchestrator worker', err));

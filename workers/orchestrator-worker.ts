import { Worker } from '@temporalio/worker';
import { readEnvironment, taskQueues } from '../config/environment.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { installWorkerRuntime } from '../infra/worker-runtime.ts';
import { connectTemporalWorker } from '../infra/temporal-connection.ts';
import { workerWorkflowBundle } from '../infra/workflow-bundle.ts';
import { workerDeploymentOptions } from '../infra/worker-deployment.ts';

/**
 * Orchestrator worker: runs the (deterministic) workflows and nothing else. It registers no activity on purpose:
 * a worker with activities also polls its queue's activity tasks, and would take bookkeeping activities it cannot
 * run ("not registered"), failing attempts at random. Every activity of this queue runs in the bookkeeping worker
 * (workers/bookkeeping-worker.ts), a process of its own. Its workflow code is the pre-built bundle
 * (`npm run build:workflows`, infra/workflow-bundle.ts) when that matches this checkout's sources, else it is
 * bundled at start.
 */

const log = createServiceLogger('orchestrator-worker');

async function run(): Promise<void> {
  const env = readEnvironment();
  // Activity and worker logs (Temporal's `log`) go through this logger; metrics when TBT_METRICS_PORT is set.
  installWorkerRuntime(log, 'orchestrator', env);
  await ensureControlDatabase(env);
  const bundle = await workerWorkflowBundle(log);
  const connection = await connectTemporalWorker(env);
  try {
    const worker = await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: taskQueues(env).orchestrator,
      workflowBundle: bundle.workflowBundle,
      shutdownGraceTime: '10s',
      ...workerDeploymentOptions(env, bundle.buildId),
    });
    log.info(
      { taskQueue: taskQueues(env).orchestrator, buildId: bundle.buildId, prebuilt: bundle.prebuilt },
      'orchestrator worker started',
    );
    await worker.run();
  } finally {
    await connection.close();
  }
}

run().catch((err: unknown) => exitWithCrash(log, 'orchestrator worker', err));

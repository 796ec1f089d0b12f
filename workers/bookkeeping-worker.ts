import { Worker } from '@temporalio/worker';
import { databaseUrl, readEnvironment, taskQueues } from '../config/environment.ts';
import { createCampaignActivities } from '../activities/campaign-activities.ts';
import { createQueueWatchActivities } from '../activities/queue-watch-activities.ts';
import { createSmokeActivities } from '../activities/smoke-activities.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { installWorkerRuntime } from '../infra/worker-runtime.ts';
import { connectTemporalWorker } from '../infra/temporal-connection.ts';
import { workerDeploymentOptions } from '../infra/worker-deployment.ts';
import { workerWorkflowBundle } from '../infra/workflow-bundle.ts';

const log = createServiceLogger('bookkeeping-worker');

/**
 * Bookkeeping worker: the campaign's bookkeeping activities (ingest, select, record, aggregate, report) and the
 * stack's smoke check, in a process of their own, so that their Postgres reads and files never share memory or an
 * event loop with the workflow worker. It polls the activity side of the workflows' queue
 * (`taskQueues(env).bookkeeping`: in Temporal a queue's workflow tasks and activity tasks are dispatched
 * separately, and the orchestrator worker registers no activity, so it never polls them), so workflow code and
 * recorded histories are unchanged. Stateless: run as many as the load needs.
 */

async function run(): Promise<void> {
  const env = readEnvironment();
  // Activity and worker logs (Temporal's `log`) go through this logger; metrics when TBT_METRICS_PORT is set.
  installWorkerRuntime(log, 'bookkeeping', env);
  await ensureControlDatabase(env);
  // Versioned, it serves the activities of the workflows of its own build: the bundle's build id, as the orchestrator.
  const versioning = env.TBT_WORKER_DEPLOYMENT_NAME
    ? workerDeploymentOptions(env, (await workerWorkflowBundle(log)).buildId)
    : {};
  const connection = await connectTemporalWorker(env);
  const taskQueue = taskQueues(env).bookkeeping;
  try {
    const worker = await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue,
      activities: {
        ...createCampaignActivities({ controlUrl: databaseUrl(env), stateDir: env.TBT_STATE_DIR }),
        ...createSmokeActivities(databaseUrl(env)),
        // The campaign's look at the rollout queue's pollers (workflows/queue-watch.ts).
        ...createQueueWatchActivities(),
      },
      maxConcurrentActivityTaskExecutions: 8,
      shutdownGraceTime: '10s',
      ...versioning,
    });
    log.info({ taskQueue }, 'bookkeeping worker started');
    await worker.run();
  } finally {
    await connection.close();
  }
}

run().catch((err: unknown) => exitWithCrash(log, 'bookkeeping worker', err));

import { Worker } from '@temporalio/worker';
import { databaseUrl, readEnvironment, taskQueues } from '../config/environment.ts';
import { createGpuActivities } from '../activities/gpu-activities.ts';
import { gpuHost } from '../config/gpu-host.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { installWorkerRuntime } from '../infra/worker-runtime.ts';
import { connectTemporalWorker } from '../infra/temporal-connection.ts';

/**
 * GPU worker: one per GPU host, polling that host's own task queue (`<prefix>-gpu-<host>`, host from
 * TBT_GPU_HOST or the hostname). It drives the campaign's learner process group and the local policy server.
 * Learner and policy server run detached: they survive a crash of this worker and are found again.
 */

let log = createServiceLogger('gpu-worker');

async function run(): Promise<void> {
  const env = readEnvironment();
  // Activity and worker logs (Temporal's `log`) go through this logger; metrics when TBT_METRICS_PORT is set.
  installWorkerRuntime(log, 'gpu', env);
  const host = gpuHost(env);
  const taskQueue = taskQueues(env).gpu(host);
  log = log.child({ host });
  const connection = await connectTemporalWorker(env);
  try {
    const worker = await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue,
      activities: createGpuActivities({ stateDir: env.TBT_STATE_DIR, controlUrl: databaseUrl(env) }),
      // One training step at a time per host; exports and syncs may overlap with episodes elsewhere.
      maxConcurrentActivityTaskExecutions: 2,
      shutdownGraceTime: '30s',
    });
    log.info({ taskQueue }, 'gpu worker started');
    await worker.run();
  } finally {
    await connection.close();
  }
}

run().catch((err: unknown) => exitWithCrash(log, 'gpu worker', err));

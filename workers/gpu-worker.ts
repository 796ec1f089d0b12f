import { NativeConnection, Worker } from '@temporalio/worker';
import pino from 'pino';
import { databaseUrl, readEnvironment, taskQueues, temporalAddress } from '../config/environment.ts';
import { createGpuActivities, gpuHost } from '../activities/gpu-activities.ts';

/**
 * GPU worker: one per GPU host, polling that host's own task queue (`<prefix>-gpu-<host>`, host from
 * TBT_GPU_HOST or the hostname). It drives the campaign's learner process group and the local policy server.
 * Learner and policy server run detached: they survive a crash of this worker and are found again.
 */

async function run(): Promise<void> {
  const env = readEnvironment();
  const host = gpuHost(env);
  const taskQueue = taskQueues(env).gpu(host);
  const log = pino({ name: 'gpu-worker', base: { host, pid: process.pid } });
  const connection = await NativeConnection.connect({ address: temporalAddress(env) });
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

run().catch((err: unknown) => {
  console.error('gpu worker failed:', err);
  process.exit(1);
});

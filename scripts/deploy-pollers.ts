import { readEnvironment, taskQueues, temporalAddress } from '../config/environment.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';

/**
 * Waits until the compose stack's workers poll Temporal: the orchestrator worker the orchestrator queue's workflow
 * tasks, the bookkeeping worker its activity tasks, ROLLOUT (default 1) rollout workers the rollout queue, and a GPU
 * worker the queue of each host in GPU_HOSTS (comma-separated, e.g. gpu-0).
 * A worker that polls got through Temporal's frontend with the deployment's namespace, so this is the check that
 * each worker container is connected (scripts/deploy-test.sh). Temporal's address: TBT_TEMPORAL_ADDRESS.
 *
 *   tsx scripts/deploy-pollers.ts [ROLLOUT] [TIMEOUT_S] [GPU_HOSTS]
 *
 * Prints `pollers: QUEUE/TYPE=N ...` and exits 0 once every count is reached, or 1 naming what is missing.
 */

/** temporal.api.enums.v1.TaskQueueType */
const workflowTasks = 1;
const activityTasks = 2;

async function run(): Promise<void> {
  const rollout = Number(process.argv[2] ?? 1);
  const timeoutMs = Number(process.argv[3] ?? 180) * 1000;
  const gpuHosts = (process.argv[4] ?? '').split(',').filter(Boolean);
  const env = readEnvironment();
  const queues = taskQueues(env);
  const wanted = [
    { name: queues.orchestrator, type: workflowTasks, label: 'workflow', min: 1 },
    { name: queues.bookkeeping, type: activityTasks, label: 'activity', min: 1 },
    { name: queues.rollout, type: activityTasks, label: 'activity', min: rollout },
    ...gpuHosts.map((host) => ({ name: queues.gpu(host), type: activityTasks, label: 'activity', min: 1 })),
  ];
  const deadline = Date.now() + timeoutMs;
  let seen: string[] = [];
  for (;;) {
    try {
      const connection = await connectTemporalClient(env, 5000);
      try {
        const counts = await Promise.all(
          wanted.map(async (w) => {
            const { pollers } = await connection.workflowService.describeTaskQueue({
              namespace: env.TBT_TEMPORAL_NAMESPACE,
              taskQueue: { name: w.name },
              taskQueueType: w.type,
            });
            return new Set(pollers.map((p) => p.identity)).size;
          }),
        );
        seen = wanted.map((w, i) => `${w.name}/${w.label}=${counts[i]}`);
        if (wanted.every((w, i) => counts[i]! >= w.min)) {
          console.log(`pollers: ${seen.join(' ')}`);
          return;
        }
      } finally {
        await connection.close();
      }
    } catch (err) {
      seen = [`Temporal at ${temporalAddress(env)} not answering: ${err instanceof Error ? err.message : err}`];
    }
    if (Date.now() > deadline) {
      const want = wanted.map((w) => `${w.name}/${w.label}>=${w.min}`).join(' ');
      throw new Error(`workers not polling after ${timeoutMs / 1000} s: want ${want}, have ${seen.join(' ')}`);
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

run().catch((err: unknown) => {
  console.error(`pollers: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});

import type { NativeConnection } from '@temporalio/worker';
import { Worker } from '@temporalio/worker';
import { createEpisodeActivities, type LazyThinkingboxResources } from '../../activities/episode-activities.ts';
import type { SandboxPool } from '../../activities/sandbox-pool.ts';
import { TerminalStateGrader } from '../../activities/terminal-state-grader.ts';
import { taskQueues } from '../../config/environment.ts';
import { workflowBundle } from './stack.ts';

/**
 * The two workers an episode batch needs, as in production: a rollout worker running the real episode activities
 * and an orchestrator worker running the workflows only, on task queues of their own prefix.
 */
export async function episodeWorkers(
  connection: NativeConnection,
  prefix: string,
  deps: { pool: SandboxPool; controlUrl: string; thinkingbox: LazyThinkingboxResources },
): Promise<{ queues: ReturnType<typeof taskQueues>; rollout: Worker; orchestrator: Worker }> {
  const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
  const rollout = await Worker.create({
    connection,
    taskQueue: queues.rollout,
    activities: createEpisodeActivities({
      pool: deps.pool,
      grader: new TerminalStateGrader(deps.pool, deps.controlUrl),
      controlUrl: deps.controlUrl,
      thinkingbox: deps.thinkingbox,
    }),
  });
  const orchestrator = await Worker.create({
    connection,
    taskQueue: queues.orchestrator,
    workflowBundle: await workflowBundle(),
  });
  return { queues, rollout, orchestrator };
}

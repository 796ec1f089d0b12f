import type { NativeConnection } from '@temporalio/worker';
import { Worker } from '@temporalio/worker';
import { createEpisodeActivities } from '../../activities/episode-activities.ts';
import {
  episodeDependencies,
  episodeEnvironment,
  episodeRunOptions,
  type EpisodeBackends,
} from '../../rollout/episode-setup.ts';
import { playEpisode, type EpisodeRecord } from '../../rollout/episode-runner.ts';
import { findTask } from '../../rollout/task-lookup.ts';
import type { LazyThinkingboxResources } from '../../rollout/thinkingbox-resources.ts';
import type { ThinkingBoxResources } from '../../datasets/thinkingbox/thinkingbox-environment.ts';
import type { EpisodeConfig } from '../../config/episode-config.ts';
import type { ImportedTask } from '../../config/thinkingbox-schema.ts';
import type { SandboxPool } from '../../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../../sandbox/terminal-state-grader.ts';
import { taskQueues } from '../../config/environment.ts';
import { controlReady, newPool, workflowBundle } from './stack.ts';
import { episodeHeartbeatMs } from '../../rollout/episode-recording.ts';

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
    maxHeartbeatThrottleInterval: episodeHeartbeatMs,
  });
  const orchestrator = await Worker.create({
    connection,
    taskQueue: queues.orchestrator,
    workflowBundle: await workflowBundle(),
  });
  return { queues, rollout, orchestrator };
}

/**
 * One episode of an imported task in this process (no Temporal): a fresh sandbox pool for the grader, the
 * given ThinkingBox resources for the servers, closed afterwards.
 */
export async function runImportedEpisode(
  config: EpisodeConfig,
  suiteDir: string,
  task: ImportedTask,
  resources: ThinkingBoxResources,
  label: string,
): Promise<EpisodeRecord> {
  const found = findTask(suiteDir, task.uid);
  const pool = newPool();
  const backends: EpisodeBackends = {
    pool,
    grader: new TerminalStateGrader(pool, await controlReady()),
    thinkingbox: () => resources,
  };
  try {
    return await playEpisode(
      episodeDependencies(config, episodeEnvironment(backends, config, found.suite, found.task), task),
      task,
      label,
      episodeRunOptions(config),
    );
  } finally {
    await pool.close();
  }
}

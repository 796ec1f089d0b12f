import { proxyActivities } from '@temporalio/workflow';
import type { EpisodeActivities, EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../activities/episode-store.ts';

/**
 * Runs a list of episodes on the rollout task queue with bounded concurrency and returns their summaries
 * in input order. Episode ids are the idempotency keys, so a replay or retry never runs one twice.
 */

export interface EpisodeBatchInput {
  rolloutQueue: string;
  episodes: EpisodeActivityInput[];
  concurrency: number;
}

export function episodeActivities(rolloutQueue: string, wallClockMs: number) {
  return proxyActivities<EpisodeActivities>({
    taskQueue: rolloutQueue,
    // The episode enforces its own wall clock; the activity gets that plus room for set-up and grading.
    startToCloseTimeout: wallClockMs + 5 * 60_000,
    heartbeatTimeout: '5 minutes',
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', backoffCoefficient: 2, nonRetryableErrorTypes: ['BadInput'] },
  });
}

export async function runEpisodeBatch(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  const results: EpisodeSummary[] = new Array(input.episodes.length);
  let next = 0;
  const lane = async () => {
    while (next < input.episodes.length) {
      const i = next++;
      const episode = input.episodes[i]!;
      const { runEpisode } = episodeActivities(input.rolloutQueue, episode.config.limits.wall_clock_ms);
      results[i] = await runEpisode(episode);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(input.concurrency, input.episodes.length)) }, lane));
  return results;
}

export async function episodeBatchWorkflow(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  return runEpisodeBatch(input);
}

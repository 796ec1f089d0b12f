import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';

/**
 * Runs a list of episodes on the rollout task queue with bounded concurrency and returns their summaries
 * in input order. Episode ids are the idempotency keys, so a replay or retry never runs one twice.
 */

export interface EpisodeBatchInput {
  rolloutQueue: string;
  episodes: EpisodeActivityInput[];
  concurrency: number;
}

export async function runEpisodeBatch(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  const results: EpisodeSummary[] = new Array(input.episodes.length);
  let next = 0;
  // Episode ids double as activity ids only when the caller's list repeats none.
  const uniqueIds = new Set(input.episodes.map((e) => e.episodeId)).size === input.episodes.length;
  const lane = async () => {
    while (next < input.episodes.length) {
      const i = next++;
      results[i] = await runEpisodeOrInfraError(input.rolloutQueue, input.episodes[i]!, uniqueIds);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(input.concurrency, input.episodes.length)) }, lane));
  return results;
}

export async function episodeBatchWorkflow(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  return runEpisodeBatch(input);
}

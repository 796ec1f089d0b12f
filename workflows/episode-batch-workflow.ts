import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { EpisodeActivities, EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import { isBadInputType } from '../core/errors.ts';
import { episodeOptions } from './activity-options.ts';

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
  return proxyActivities<EpisodeActivities>(episodeOptions(rolloutQueue, wallClockMs));
}

/**
 * Runs one episode; an activity that still fails after its retries (worker crashes, heartbeat timeouts,
 * control-database outages) becomes an infrastructure-error summary, so refill and re-run logic handle it
 * instead of failing the whole step. Bad input still fails at once.
 */
export async function runEpisodeOrInfraError(
  rolloutQueue: string,
  input: EpisodeActivityInput,
): Promise<EpisodeSummary> {
  const { runEpisode } = episodeActivities(rolloutQueue, input.config.limits.wall_clock_ms);
  try {
    return await runEpisode(input);
  } catch (err) {
    if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && isBadInputType(err.cause.type))
      throw err;
    if (!(err instanceof ActivityFailure)) throw err;
    return {
      id: input.episodeId,
      outcome: 'infrastructure_error',
      reward: 0,
      finishReason: 'infrastructure_error',
      cause: `episode activity failed after its retries: ${err.cause?.message ?? err.message}`.slice(0, 500),
      policyTokens: 0,
    };
  }
}

export async function runEpisodeBatch(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  const results: EpisodeSummary[] = new Array(input.episodes.length);
  let next = 0;
  const lane = async () => {
    while (next < input.episodes.length) {
      const i = next++;
      results[i] = await runEpisodeOrInfraError(input.rolloutQueue, input.episodes[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(input.concurrency, input.episodes.length)) }, lane));
  return results;
}

export async function episodeBatchWorkflow(input: EpisodeBatchInput): Promise<EpisodeSummary[]> {
  return runEpisodeBatch(input);
}

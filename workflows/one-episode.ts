import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { EpisodeActivities, EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import { isBadInputType } from '../core/errors.ts';
import { episodeActivityOptions } from './activity-options.ts';

/** The episode activities on the rollout queue, with a start-to-close limit sized to the episode's wall clock. */
export function episodeActivities(rolloutQueue: string, wallClockMs: number) {
  return proxyActivities<EpisodeActivities>(episodeActivityOptions(rolloutQueue, wallClockMs));
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

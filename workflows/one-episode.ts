import { ActivityFailure, ApplicationFailure, patched, proxyActivities } from '@temporalio/workflow';
import type { EpisodeActivities, EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import { isBadInputType } from '../core/errors.ts';
import { episodeActivityOptions } from './activity-options.ts';

/**
 * The line the Temporal UI shows beside an episode activity: what it is for and which key it runs
 * (`probe · task-7#2 ~retry-1`, `step 3 · task-7#9`), so a shard's pending rows can be told apart.
 */
export function episodeActivitySummary(input: EpisodeActivityInput): string {
  const retry = /~retry-\d+$/.exec(input.episodeId)?.[0] ?? '';
  const what = input.step !== undefined ? `step ${input.step}` : input.purpose;
  return `${what} · ${input.taskUid}#${input.repetition ?? 0}${retry ? ` ${retry}` : ''}`;
}

/**
 * Runs one episode and returns its summary. An episode that ended in an infrastructure error fails its activity
 * (a failed attempt in the UI; activities/temporal-failure.ts) with its stored summary in the details: that summary
 * is returned, as it was when such an episode completed its activity (histories from then replay unchanged). An
 * activity that still fails after its retries (worker crashes, heartbeat timeouts, control-database outages) becomes
 * an infrastructure-error summary too, so refill and re-run logic handle it instead of failing the whole step. Bad
 * input still fails at once. `uniqueIds`: the caller's episode ids are unique within this workflow, so each activity
 * takes its episode id as activity id (the server refuses a second pending activity with the same id).
 */
export async function runEpisodeOrInfraError(
  rolloutQueue: string,
  input: EpisodeActivityInput,
  uniqueIds = true,
): Promise<EpisodeSummary> {
  // Histories recorded before episode-named activities scheduled them with sequence-number ids: replay keeps those.
  const named = uniqueIds && patched('episode-named-activities');
  try {
    // Options per call: the queue, limits sized to this episode's wall clock, its summary and id.
    const { runEpisode } = proxyActivities<EpisodeActivities>({
      ...episodeActivityOptions(rolloutQueue, input.config.limits.wall_clock_ms),
      summary: episodeActivitySummary(input),
      ...(named ? { activityId: input.episodeId } : {}),
    });
    return await runEpisode(input);
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    if (err.cause instanceof ApplicationFailure && isBadInputType(err.cause.type)) throw err;
    const stored = storedInfrastructureError(err, input.episodeId);
    if (stored) return stored;
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

/**
 * The stored summary an episode's failed attempt carries (type EpisodeInfrastructureError): recognised by its
 * details, the summary of this very episode, ended in an infrastructure error.
 */
function storedInfrastructureError(err: ActivityFailure, episodeId: string): EpisodeSummary | undefined {
  if (!(err.cause instanceof ApplicationFailure)) return undefined;
  const summary = err.cause.details?.[0] as Partial<EpisodeSummary> | undefined;
  if (summary?.id !== episodeId || summary.outcome !== 'infrastructure_error') return undefined;
  return summary as EpisodeSummary;
}

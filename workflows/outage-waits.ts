import { log, setCurrentDetails, sleep } from '@temporalio/workflow';
import { pausedStageRetryMs } from './activity-options.ts';
import type { KeyedEpisodesInput } from './keyed-episode-types.ts';
import { runShardedEpisodes, type StageSummary } from './keyed-episodes.ts';

/**
 * A sharded stage (probe or evaluation) that waits out an outage: while keys still end in infrastructure errors
 * after their re-runs, it waits a capped backoff and runs the stage again under the same ids (finished episodes
 * are reused from the store; infrastructure-errored ones are played again), at most `waits` times. Then the
 * caller decides (the evaluation's coverage gate, the probe's selection).
 */

export interface OutageWaits {
  waits: number;
  initialMs: number;
  maxMs: number;
}

export async function runShardedEpisodesWaitingOutOutages(
  input: KeyedEpisodesInput,
  outage: OutageWaits | undefined,
): Promise<StageSummary> {
  let stage = await runShardedEpisodes(input);
  let reruns = stage.reruns;
  for (let wait = 1; outage && stage.uncovered > 0 && wait <= outage.waits; wait++) {
    const ms = pausedStageRetryMs(wait, {
      paused_stage_retry_ms: outage.initialMs,
      paused_stage_retry_max_ms: outage.maxMs,
    });
    setCurrentDetails(
      `${stage.uncovered} of ${stage.keys} keys still end in infrastructure errors ` +
        `(e.g. ${stage.uncoveredSamples[0]}); waiting ${Math.round(ms / 1000)} s for the infrastructure, then ` +
        `running them again (wait ${wait} of ${outage.waits})`,
    );
    log.warn('stage waits out an outage', { idPrefix: input.idPrefix, uncovered: stage.uncovered, wait, ms });
    await sleep(ms);
    stage = await runShardedEpisodes(input);
    reruns += stage.reruns;
  }
  return { ...stage, reruns };
}

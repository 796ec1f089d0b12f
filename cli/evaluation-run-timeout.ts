import type { CampaignConfig } from '../config/campaign-config.ts';
import {
  defaultInfraBackoff,
  defaultMaxReruns,
  episodeActivityOptions,
  pausedStageRetryMs,
} from '../workflows/activity-options.ts';
import type { EvaluationInput } from '../workflows/evaluation-workflow.ts';

/**
 * The run timeout of an evaluation run, sized to its work, from above: counted as if shards ran one after another
 * (they share the bound as lanes, and the history budget may cut them smaller: never slower), each in waves of
 * `evaluation.concurrency` episodes that last at most the episode activity's limit (the wall clock plus set-up
 * and grading), with a quarter more for waves that end unevenly; then one chain of re-runs of a key whose episodes
 * ended in infrastructure errors (each after the longest backoff); each outage wait (`outageWaits`, as
 * `evaluationOutageWaits` in workflows/scheduled-evaluation-workflow.ts gives them) with a pass of an episode and
 * its re-runs after it; and 90 minutes for a GPU queue wait, the policy server start and the aggregation. Long
 * enough that a reference evaluation is not cut off part-way (a flat day did), short enough that a run stuck on a
 * queue without a worker ends; either way the finished episodes are kept and the next run of the same step resumes.
 */
export function evaluationRunTimeoutMs(work: {
  config: CampaignConfig;
  tasks: number;
  repeats: number;
  outageWaits: EvaluationInput['outageWaits'];
}): number {
  if (!(work.tasks >= 1)) throw new RangeError(`tasks: expected >= 1, got ${work.tasks}`);
  if (!(work.repeats >= 1)) throw new RangeError(`repeats: expected >= 1, got ${work.repeats}`);
  const { concurrency, shard_size: shardSize } = work.config.evaluation;
  const episodeMs = episodeActivityOptions('', work.config.episode.limits.wall_clock_ms).startToCloseTimeout;
  if (typeof episodeMs !== 'number') throw new TypeError(`episode activity limit: expected ms, got ${episodeMs}`);
  // Shards of `shard_size` keys, the last one partly filled, as workflows/keyed-episodes.ts cuts them (not
  // imported: it would load the workflow SDK into every `tbt eval aggregate`).
  const keys = work.tasks * work.repeats;
  const rest = keys % shardSize;
  const waves = Math.floor(keys / shardSize) * Math.ceil(shardSize / concurrency) + Math.ceil(rest / concurrency);
  const reruns = defaultMaxReruns * (episodeMs + defaultInfraBackoff.maxMs);
  let outage = 0;
  const waits = work.outageWaits;
  for (let wait = 1; waits && wait <= waits.waits; wait++) {
    const spacing = { paused_stage_retry_ms: waits.initialMs, paused_stage_retry_max_ms: waits.maxMs };
    outage += pausedStageRetryMs(wait, spacing) + episodeMs + reruns;
  }
  return Math.ceil(1.25 * waves * episodeMs) + reruns + outage + 90 * 60_000;
}

import { setCurrentDetails, sleep } from '@temporalio/workflow';
import { infraBackoffMs } from './activity-options.ts';
import { ConcurrencySlots } from './concurrency-slots.ts';
import type { ShardInput, ShardSummary } from './keyed-episode-types.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';
import { episodeProgress } from './ui-text.ts';

/**
 * One shard of a probe or evaluation stage (keyed-episodes.ts): keys `keyOffset .. keyOffset + keyCount - 1`
 * of `uids x repeats` (uid-major), at most `concurrency` episodes in flight. A key whose episode ends in an
 * infrastructure error waits (exponential backoff, activity-options.ts) and is re-run under a new id
 * (`...~retry-<n>`) up to `maxReruns` times, without holding a slot while it waits. Returns counts only.
 */

export async function episodeShardWorkflow(input: ShardInput): Promise<ShardSummary> {
  const slots = new ConcurrencySlots(input.concurrency);
  const summary: ShardSummary = {
    keys: input.keyCount,
    episodes: 0,
    reruns: 0,
    uncovered: 0,
    uncoveredSamples: [],
    peakInFlight: 0,
  };
  let done = 0;
  const showProgress = () =>
    setCurrentDetails(
      episodeProgress({
        done,
        keys: input.keyCount,
        inFlight: slots.inFlight,
        reruns: summary.reruns,
        uncovered: summary.uncovered,
      }),
    );
  showProgress();
  // A uid listed twice gives two episodes one id; their activities then keep sequence-number ids.
  const uniqueIds = new Set(input.uids).size === input.uids.length;
  const runKey = async (index: number): Promise<void> => {
    const uid = input.uids[Math.floor(index / input.repeats)]!;
    const repetition = index % input.repeats;
    const key = `${uid}#${repetition}`;
    for (let attempt = 0; ; attempt += 1) {
      if (attempt > 0) await sleep(infraBackoffMs(attempt, input.infraBackoff));
      const final = await slots.run(() => {
        showProgress();
        return runEpisodeOrInfraError(
          input.rolloutQueue,
          {
            episodeId: `${input.idPrefix}/${key}${attempt ? `~retry-${attempt}` : ''}`,
            suiteDir: input.suiteDir,
            taskUid: uid,
            purpose: input.purpose,
            campaign: input.campaignId,
            repetition,
            config: input.episode,
          },
          uniqueIds,
        );
      });
      summary.episodes += 1;
      if (attempt > 0) summary.reruns += 1;
      if (final.outcome !== 'infrastructure_error' || attempt >= input.maxReruns) done += 1;
      showProgress();
      if (final.outcome !== 'infrastructure_error') return;
      if (attempt >= input.maxReruns) {
        summary.uncovered += 1;
        if (summary.uncoveredSamples.length < 3)
          summary.uncoveredSamples.push(`${key}: ${final.cause ?? 'infrastructure error'}`);
        return;
      }
    }
  };
  await Promise.all(Array.from({ length: input.keyCount }, (_, j) => runKey(input.keyOffset + j)));
  summary.peakInFlight = slots.peak;
  return summary;
}

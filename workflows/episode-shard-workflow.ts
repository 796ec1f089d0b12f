import { getExternalWorkflowHandle, setCurrentDetails, setHandler, sleep, workflowInfo } from '@temporalio/workflow';
import { infraBackoffMs } from './activity-options.ts';
import { ConcurrencySlots } from './concurrency-slots.ts';
import {
  laneGiveBackBatch,
  shardSlotsSignal,
  countTaskError,
  stageSlotsSignal,
  type ShardInput,
  type ShardSummary,
} from './keyed-episode-types.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';
import { episodeProgress } from './ui-text.ts';

/**
 * One shard of a probe or evaluation stage (keyed-episodes.ts): keys `keyOffset .. keyOffset + keyCount - 1`
 * of `uids x repeats` (uid-major), at most `concurrency` episodes in flight. A key whose episode ends in an
 * infrastructure error waits (exponential backoff, activity-options.ts) and is re-run under a new id
 * (`...~retry-<n>`) up to `maxReruns` times, without holding a slot while it waits. Returns counts only.
 *
 * As a lane (`laneSlots` set) it shares the stage's bound with the shards beside it: it starts with the slots the
 * stage gives it, takes more by signal, and signals back every slot beyond its unfinished keys (a key waiting to
 * re-run keeps one), so the next shard fills them while this one's last episodes run.
 */

export async function episodeShardWorkflow(input: ShardInput): Promise<ShardSummary> {
  const slots = new ConcurrencySlots(input.laneSlots ?? input.concurrency);
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
        taskErrors: summary.taskErrors,
      }),
    );
  showProgress();
  const givingBack: Promise<void>[] = [];
  const giveBackSpare = () => {
    if (input.laneSlots === undefined) return;
    const unfinished = input.keyCount - done;
    const spare = slots.capacity - unfinished;
    if (spare < (unfinished > 0 ? laneGiveBackBatch(input.concurrency) : 1)) return;
    slots.remove(spare);
    const stage = getExternalWorkflowHandle(workflowInfo().parent!.workflowId);
    givingBack.push(stage.signal(stageSlotsSignal, { shard: workflowInfo().workflowId, slots: spare }));
  };
  if (input.laneSlots !== undefined)
    setHandler(shardSlotsSignal, (n) => {
      slots.add(n);
      giveBackSpare();
    });
  giveBackSpare();
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
      giveBackSpare();
      showProgress();
      // Not re-run: the grader already graded it twice and met the same exception at the same place.
      if (final.outcome === 'task_error') countTaskError(summary, uid, final.cause);
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
  // The stage has every slot back before this shard's end reaches it.
  await Promise.all(givingBack);
  summary.peakInFlight = slots.peak;
  return summary;
}

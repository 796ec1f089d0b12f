import { ApplicationFailure, log, patched, setCurrentDetails, sleep } from '@temporalio/workflow';
import { BadInputError } from '../core/errors.ts';
import { pausedStageRetryMs } from './activity-options.ts';
import { HistoryBudgetError, planStage, type StagePlan } from './history-budget.ts';
import type { KeyedEpisodesInput } from './keyed-episode-types.ts';
import { defaultShardSize, runShardedEpisodes, type StageSummary } from './keyed-episodes.ts';

/**
 * A sharded stage (probe or evaluation) that waits out an outage: while keys still end in infrastructure errors
 * after their re-runs, it waits a capped backoff and runs the stage again under the same ids (finished episodes
 * are reused from the store; infrastructure-errored ones are played again), at most `waits` times. Then the
 * caller decides (the evaluation's coverage gate, the probe's selection).
 *
 * The cut is planned before the first shard starts (history-budget.ts, patched 'history-budget'): shards small
 * enough that each history stays within its budget at worst, and at most `shardStartsPerRun` shards per run of the
 * stage's workflow, which then continues as new between shards (its running shards finished) and goes on from the
 * shard where it stopped. A stage too large for any cut fails as bad input before it starts.
 */

export interface OutageWaits {
  waits: number;
  initialMs: number;
  maxMs: number;
}

/**
 * Where a stage that continued as new goes on: the plan of the chain's first run (a deploy between runs must not
 * move shard boundaries under a pass), the pass (0, then one per outage wait) and its next shard, the pass so far
 * (absent before its first shard), and the re-runs of the passes before.
 */
export interface StageResume {
  shardSize: number;
  shardStartsPerRun: number;
  pass: number;
  nextShard: number;
  total?: StageSummary;
  reruns: number;
}

/** The stage workflow's run: `resume` from its input, and how it continues as new with a new one. */
export interface StageContinuation {
  resume?: StageResume;
  continueAsNew: (resume: StageResume) => Promise<never>;
}

export async function runShardedEpisodesWaitingOutOutages(
  input: KeyedEpisodesInput,
  outage: OutageWaits | undefined,
  continuation: StageContinuation,
): Promise<StageSummary> {
  // Stages started before the history budget ran every pass whole, in shards of `shardSize`: replay keeps them so.
  if (patched('history-budget')) return runPlannedStage(input, outage, continuation);
  let stage = await runShardedEpisodes(input);
  let reruns = stage.reruns;
  for (let wait = 1; outage && stage.uncovered > 0 && wait <= outage.waits; wait++) {
    await waitOutOutage(input, stage, wait, outage);
    stage = await runShardedEpisodes(input);
    reruns += stage.reruns;
  }
  return { ...stage, reruns };
}

async function waitOutOutage(input: KeyedEpisodesInput, stage: StageSummary, wait: number, outage: OutageWaits) {
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
}

/** The stage's cut (history-budget.ts); a stage no cut fits fails as bad input, naming its size and the limit. */
function stagePlan(input: KeyedEpisodesInput, outage: OutageWaits | undefined): StagePlan {
  try {
    const plan = planStage({
      keys: input.uids.length * input.repeats,
      concurrency: input.concurrency,
      maxReruns: input.maxReruns,
      outageWaits: outage?.waits ?? 0,
      shardSize: input.shardSize ?? defaultShardSize,
      episodeBytes: JSON.stringify(input.episode).length,
      inputBytes: JSON.stringify(input).length,
      budget: input.historyBudget,
    });
    if (plan.cuts.length > 0)
      log.info('stage cut to stay within its history budget', { idPrefix: input.idPrefix, cuts: plan.cuts });
    return plan;
  } catch (err) {
    if (!(err instanceof HistoryBudgetError || err instanceof RangeError)) throw err;
    throw ApplicationFailure.nonRetryable(err.message, BadInputError.name);
  }
}

/** The passes of the stage as planned, continuing as new after `shardStartsPerRun` shard starts in one run. */
async function runPlannedStage(
  input: KeyedEpisodesInput,
  outage: OutageWaits | undefined,
  { resume, continueAsNew }: StageContinuation,
): Promise<StageSummary> {
  const { shardSize, shardStartsPerRun } = resume ?? stagePlan(input, outage);
  const shards = Math.ceil((input.uids.length * input.repeats) / shardSize);
  let { pass, nextShard, total, reruns } = resume ?? { pass: 0, nextShard: 0, reruns: 0 };
  let starts = 0;
  for (;;) {
    if (nextShard < shards) {
      if (starts >= shardStartsPerRun) {
        log.info('stage continues as new', { idPrefix: input.idPrefix, pass, nextShard });
        return continueAsNew({ shardSize, shardStartsPerRun, pass, nextShard, total, reruns });
      }
      const end = Math.min(shards, nextShard + shardStartsPerRun - starts);
      total = await runShardedEpisodes(input, { shardSize, first: nextShard, end, total });
      starts += end - nextShard;
      nextShard = end;
      continue;
    }
    // A stage of no keys runs no shard: its pass is empty.
    const stage = total ?? (await runShardedEpisodes(input, { shardSize, first: 0, end: 0 }));
    reruns += stage.reruns;
    if (!outage || stage.uncovered === 0 || pass >= outage.waits) return { ...stage, reruns };
    pass += 1;
    await waitOutOutage(input, stage, pass, outage);
    [nextShard, total] = [0, undefined];
  }
}

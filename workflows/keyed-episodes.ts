import { executeChild, setCurrentDetails, workflowInfo } from '@temporalio/workflow';
import { episodeShardWorkflow } from './episode-shard-workflow.ts';
import type { KeyedEpisodesInput, ShardSummary } from './keyed-episode-types.ts';
import { campaignKey, stageKey, stepKey } from './search-attribute-keys.ts';
import { shardSummary, thousands } from './ui-text.ts';

/**
 * The one sharded episode runner of probing and evaluation. A stage of `uids x repeats` keys (`uid#rep`,
 * uid-major) is cut into shards of at most `shardSize` keys; each shard is a child workflow
 * (`<idPrefix>/shard-<n>`, episode-shard-workflow.ts) and shards run one after another, each with the stage's
 * whole concurrency bound, so the bound holds across the stage and no history grows with the stage's size (a
 * shard of 500 keys is about 3,000 events; the stage itself about 8 per shard). Results stay in Postgres under
 * deterministic episode ids `<idPrefix>/<uid>#<rep>[~retry-<n>]`; shards return counts, never id lists, and
 * aggregation activities find a stage's episodes by `idPrefix`.
 */

/** About 6 history events per episode: 500 keys keep a shard near 3,000 events, re-runs included. */
export const defaultShardSize = 500;

export interface StageSummary extends Omit<ShardSummary, 'uncoveredSamples'> {
  shards: number;
  uncoveredSamples: string[];
}

/** [first key, key count] of each shard. */
export function shardRanges(keys: number, shardSize: number): [number, number][] {
  if (!Number.isInteger(shardSize) || shardSize < 1)
    throw new Error(`shard size must be an integer >= 1, got ${shardSize}`);
  const ranges: [number, number][] = [];
  for (let first = 0; first < keys; first += shardSize) ranges.push([first, Math.min(shardSize, keys - first)]);
  return ranges;
}

export async function runShardedEpisodes(input: KeyedEpisodesInput): Promise<StageSummary> {
  const { uids, repeats, shardSize, ...common } = input;
  const total: StageSummary = {
    keys: 0,
    episodes: 0,
    reruns: 0,
    uncovered: 0,
    uncoveredSamples: [],
    peakInFlight: 0,
    shards: 0,
  };
  const parent = workflowInfo().typedSearchAttributes;
  const ranges = shardRanges(uids.length * repeats, shardSize ?? defaultShardSize);
  const keys = uids.length * repeats;
  const stageName = input.stage ?? input.purpose;
  for (const [i, [firstKey, keyCount]] of ranges.entries()) {
    setCurrentDetails(
      `shard ${i + 1} of ${ranges.length} running; ${thousands(total.keys)}/${thousands(keys)} keys done, ` +
        `${total.reruns} re-runs, ${total.uncovered} uncovered`,
    );
    // Only the uids this shard touches travel in its input.
    const firstUid = Math.floor(firstKey / repeats);
    const lastUid = Math.floor((firstKey + keyCount - 1) / repeats);
    const summary = await executeChild(episodeShardWorkflow, {
      workflowId: `${input.idPrefix}/shard-${i}`,
      staticSummary: shardSummary(stageName, i, ranges.length, firstKey, keyCount, keys),
      staticDetails:
        `tasks ${uids[firstUid]} .. ${uids[lastUid]} x ${repeats} episodes, at most ${common.concurrency} in ` +
        `flight on task queue ${common.rolloutQueue}; episode ids ${input.idPrefix}/<uid>#<rep>[~retry-<n>]`,
      args: [
        {
          ...common,
          uids: uids.slice(firstUid, lastUid + 1),
          repeats,
          keyOffset: firstKey - firstUid * repeats,
          keyCount,
        },
      ],
      typedSearchAttributes: [
        { key: campaignKey, value: input.campaignId },
        { key: stageKey, value: input.stage ?? parent.get(stageKey) ?? input.purpose },
        { key: stepKey, value: parent.get(stepKey) ?? 0 },
      ],
    });
    total.shards += 1;
    total.keys += summary.keys;
    total.episodes += summary.episodes;
    total.reruns += summary.reruns;
    total.uncovered += summary.uncovered;
    total.peakInFlight = Math.max(total.peakInFlight, summary.peakInFlight);
    total.uncoveredSamples.push(...summary.uncoveredSamples.slice(0, 3 - total.uncoveredSamples.length));
  }
  setCurrentDetails(`${thousands(total.keys)}/${thousands(keys)} keys done in ${total.shards} shards; aggregating`);
  return total;
}

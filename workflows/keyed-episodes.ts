import {
  condition,
  executeChild,
  patched,
  setCurrentDetails,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { episodeShardWorkflow } from './episode-shard-workflow.ts';
import {
  shardSlotsSignal,
  stageSlotsSignal,
  addTaskErrors,
  type KeyedEpisodesInput,
  type ShardInput,
  type ShardSummary,
} from './keyed-episode-types.ts';
import { campaignKey, stageKey, stepKey } from './search-attribute-keys.ts';
import { shardSummary, thousands } from './ui-text.ts';

/**
 * The one sharded episode runner of probing and evaluation. A stage of `uids x repeats` keys (`uid#rep`,
 * uid-major) is cut into shards of at most `shardSize` keys; each shard is a child workflow
 * (`<idPrefix>/shard-<n>`, episode-shard-workflow.ts), so no shard's history grows with the stage's size (a shard of
 * 500 keys is about 3,000 events; the stage itself about 8 per shard, plus a few per slot handed over). The cut is
 * planned before the stage starts (history-budget.ts, outage-waits.ts) so that every history stays within a budget.
 *
 * The stage's concurrency bound is one pool of slots shared by shards running as lanes (patched 'shard-lanes'):
 * the first shard gets every slot; a shard whose unfinished keys drop below its slots gives the spare ones back,
 * and the stage hands them to the youngest shard still short of slots, else starts the next shard with them. The
 * slots held by all shards never exceed the bound, and a shard's last, long episodes no longer leave the rest of
 * the bound empty. (Before the patch shards ran one after another, each with the whole bound.) Results stay in
 * Postgres under
 * deterministic episode ids `<idPrefix>/<uid>#<rep>[~retry-<n>]`; shards return counts, never id lists, and
 * aggregation activities find a stage's episodes by `idPrefix`.
 */

/**
 * About 6 history events per episode: 500 keys keep a shard near 3,000 events when its episodes end well. A cap:
 * history-budget.ts plans smaller shards where re-runs could take one past its budget (outage-waits.ts).
 */
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

/**
 * Shards `first` up to `end` of a pass cut into shards of `shardSize` keys (history-budget.ts plans it), added to
 * `total` (the pass so far, possibly from an earlier run of the workflow).
 */
export interface ShardSegment {
  shardSize: number;
  first: number;
  end: number;
  total?: StageSummary;
}

/** Runs a whole pass (`segment` absent: as before the history budget) or one segment of one. */
export async function runShardedEpisodes(input: KeyedEpisodesInput, segment?: ShardSegment): Promise<StageSummary> {
  const { uids, repeats, shardSize, historyBudget: _budget, ...common } = input;
  const total: StageSummary = segment?.total ?? {
    keys: 0,
    episodes: 0,
    reruns: 0,
    uncovered: 0,
    uncoveredSamples: [],
    peakInFlight: 0,
    shards: 0,
  };
  const parent = workflowInfo().typedSearchAttributes;
  const ranges = shardRanges(uids.length * repeats, segment?.shardSize ?? shardSize ?? defaultShardSize);
  const keys = uids.length * repeats;
  const stageName = input.stage ?? input.purpose;
  const shardId = (i: number) => `${input.idPrefix}/shard-${i}`;
  /** Shard i's child options; `laneSlots` when it runs as a lane. */
  const shard = (i: number, laneSlots?: number) => {
    const [firstKey, keyCount] = ranges[i]!;
    // Only the uids this shard touches travel in its input.
    const firstUid = Math.floor(firstKey / repeats);
    const lastUid = Math.floor((firstKey + keyCount - 1) / repeats);
    const args: ShardInput = {
      ...common,
      uids: uids.slice(firstUid, lastUid + 1),
      repeats,
      keyOffset: firstKey - firstUid * repeats,
      keyCount,
      ...(laneSlots === undefined ? {} : { laneSlots }),
    };
    return {
      workflowId: shardId(i),
      staticSummary: shardSummary(stageName, i, ranges.length, firstKey, keyCount, keys),
      staticDetails:
        `tasks ${uids[firstUid]} .. ${uids[lastUid]} x ${repeats} episodes, at most ${common.concurrency} in ` +
        `flight on task queue ${common.rolloutQueue}; episode ids ${input.idPrefix}/<uid>#<rep>[~retry-<n>]`,
      args: [args] as [ShardInput],
      typedSearchAttributes: [
        { key: campaignKey, value: input.campaignId },
        { key: stageKey, value: input.stage ?? parent.get(stageKey) ?? input.purpose },
        { key: stepKey, value: parent.get(stepKey) ?? 0 },
      ],
    };
  };
  const add = (summary: ShardSummary) => {
    total.shards += 1;
    total.keys += summary.keys;
    total.episodes += summary.episodes;
    total.reruns += summary.reruns;
    total.uncovered += summary.uncovered;
    total.peakInFlight = Math.max(total.peakInFlight, summary.peakInFlight);
    total.uncoveredSamples.push(...summary.uncoveredSamples.slice(0, 3 - total.uncoveredSamples.length));
    addTaskErrors(total, summary);
  };
  const progress = (running: string) =>
    setCurrentDetails(
      `${running}; ${thousands(total.keys)}/${thousands(keys)} keys done, ` +
        `${total.reruns} re-runs, ${total.uncovered} uncovered`,
    );
  if (patched('shard-lanes'))
    await runLanes({
      keyCounts: ranges.map(([, keyCount]) => keyCount),
      first: segment?.first ?? 0,
      end: segment?.end ?? ranges.length,
      bound: input.concurrency,
      shardId,
      start: (i, laneSlots) => startChild(episodeShardWorkflow, shard(i, laneSlots)),
      add,
      progress,
    });
  else
    for (let i = 0; i < ranges.length; i++) {
      progress(`shard ${i + 1} of ${ranges.length} running`);
      add(await executeChild(episodeShardWorkflow, shard(i)));
    }
  setCurrentDetails(`${thousands(total.keys)}/${thousands(keys)} keys done in ${total.shards} shards; aggregating`);
  return total;
}

/**
 * Shards `first` up to `end` as lanes of one bound of `bound` slots (see above). A shard that is given slots but has
 * not given any back yet is short of slots; slots given back go to the youngest such shard, else start the next
 * shard, else (the last shards' tails) stay with the stage.
 */
async function runLanes(lanes: {
  keyCounts: number[];
  first: number;
  end: number;
  bound: number;
  shardId: (i: number) => string;
  start: (i: number, laneSlots: number) => Promise<ChildWorkflowHandle<typeof episodeShardWorkflow>>;
  add: (summary: ShardSummary) => void;
  progress: (running: string) => void;
}): Promise<void> {
  const { keyCounts, add, progress } = lanes;
  const shards = keyCounts.length;
  let spare = lanes.bound;
  let next = lanes.first;
  /** Bumped on every signal and shard end: the loop looks again. */
  let changes = 0;
  let failure: unknown;
  const running = new Map<string, { index: number; handle: ChildWorkflowHandle<typeof episodeShardWorkflow> }>();
  const short = new Set<string>();
  setHandler(stageSlotsSignal, ({ shard: id, slots }) => {
    spare += slots;
    short.delete(id);
    changes += 1;
  });
  const show = () => {
    const at = [...running.values()].map((r) => r.index + 1);
    progress(`shard${at.length > 1 ? 's' : ''} ${at.join(', ') || '-'} of ${shards} running`);
  };
  while (next < lanes.end || running.size > 0) {
    if (failure !== undefined) throw failure;
    const youngest = [...running.keys()].filter((id) => short.has(id)).at(-1);
    if (spare > 0 && youngest !== undefined) {
      const slots = spare;
      spare = 0;
      // A shard that ended meanwhile gave back all it had: its slots come back to the stage.
      await running
        .get(youngest)!
        .handle.signal(shardSlotsSignal, slots)
        .catch(() => {
          spare += slots;
          // Not short any more (it ended meanwhile): the next turn of the loop must not signal it again.
          short.delete(youngest);
        });
      continue;
    }
    if (spare > 0 && next < lanes.end) {
      const [index, slots] = [next, spare];
      next += 1;
      spare = 0;
      // Short before it starts: it may give slots back before startChild resolves.
      const id = lanes.shardId(index);
      if (slots < keyCounts[index]!) short.add(id);
      const handle = await lanes.start(index, slots);
      running.set(id, { index, handle });
      show();
      handle.result().then(
        (summary) => {
          add(summary);
          running.delete(id);
          short.delete(id);
          changes += 1;
          show();
        },
        (err: unknown) => {
          failure = err;
          changes += 1;
        },
      );
      continue;
    }
    const seen = changes;
    await condition(() => changes !== seen);
  }
}

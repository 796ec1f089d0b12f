import { laneGiveBackBatch } from './keyed-episode-types.ts';

/**
 * The history guard of a sharded stage (probe or evaluation, keyed-episodes.ts): a worst-case count of the events
 * and bytes each of its workflows records, and the cut that keeps every one under a budget well below Temporal's
 * limits, made before the stage starts. Pure and deterministic (workflow code plans with it; no I/O, no clock).
 *
 * Worst case, per workflow:
 * - a shard: every attempt of every key ends in an infrastructure error (1 + maxReruns attempts, a backoff timer
 *   before each re-run) and every result wakes its own workflow task; plus the slot hand-over signals of a lane.
 * - the stage (the probe's or evaluation's own workflow): per shard started, the child's start and end and the
 *   hand-over signals both ways; a full pass of every shard again after each outage wait.
 * A shard too large is cut into more, smaller shards; a stage whose shard starts outgrow one history continues as
 * new between shards (outage-waits.ts); a stage that cannot fit even so is refused, naming its key count.
 *
 * Running stages replay their plan: a change to these counts or the budget moves shard boundaries and continue-as-new
 * points of stages already running, so it goes under a new `patched()` id (as 'history-budget' guards this one).
 */

export interface HistorySize {
  events: number;
  bytes: number;
}

/** Temporal's per-workflow limits: a history past either is terminated by the server. */
export const temporalHistoryLimit: HistorySize = { events: 51_200, bytes: 50 * 1024 * 1024 };
/** Where the server starts logging warnings about a history. */
export const temporalHistoryWarning: HistorySize = { events: 10_240, bytes: 10 * 1024 * 1024 };

/**
 * The budget of every workflow of a stage: Temporal's warning level, a fifth of its limit. The estimate below is a
 * worst case for what it counts; the fivefold room covers what it does not (workflow tasks that time out or fail
 * around a worker restart, a slot signal racing a shard's end, error messages longer than assumed).
 */
export const defaultHistoryBudget: HistorySize = temporalHistoryWarning;

/** Scheduled, started, completed. */
const workflowTask = 3;
/** A `patched()` marker and its TemporalChangeVersion search-attribute upsert. */
const patchEvents = 2;
/** An episode activity scheduled, started, completed or failed, and the workflow task its result wakes. */
export const attemptEvents = 3 + workflowTask;
/** The backoff before a re-run (or an outage wait): timer started and fired, and the workflow task it wakes. */
export const timerEvents = 2 + workflowTask;
/** A signal sent: initiated, delivered (or failed), and the workflow task that learns it. */
const signalSentEvents = 2 + workflowTask;
/** A signal received, and its workflow task. */
const signalReceivedEvents = 1 + workflowTask;
/** A child started: initiated, started, completed (or failed), a workflow task for each of the last two. */
const childEvents = 3 + 2 * workflowTask;
/** A shard's own: started, first workflow task, the episode-named-activities patch, completed. */
const shardOwnEvents = 1 + workflowTask + patchEvents + 1;
/**
 * A stage workflow run's own: started, first workflow task, its patches (episode-shards, history-budget,
 * shard-lanes, the probe's probe-outage-gate), the aggregation or selection activity, completed or continued.
 */
const stageOwnEvents = 1 + workflowTask + 4 * patchEvents + attemptEvents + 1;

/** Bytes of an event beyond the payloads counted apart (ids, times, task queue, identity; measured: 30-240). */
const eventBytes = 300;
/** An episode activity's input beyond its episode config: episode id, suite folder, task uid, campaign. */
const episodeIdsBytes = 1024;
/** An attempt's failure (message, its 500-character cause, stack, the stored summary), recorded twice at worst
 * (the start of the activity's last retry carries the previous failure). */
const failureBytes = 8 * 1024;
/** Per shard, in the stage: its static summary and details, search attributes, and its result (3 samples). */
const shardStartBytes = 4 * 1024;
/** The stage's own payloads beyond its input: the aggregation's result, the continue-as-new state. */
const stageOwnBytes = 8 * 1024;

export interface StageShape {
  /** Keys of the stage (uids x repeats). */
  keys: number;
  /** Episodes in flight across the stage. */
  concurrency: number;
  maxReruns: number;
  /** Times the stage waits out an outage and runs every key again (outage-waits.ts); 0 for none. */
  outageWaits: number;
  /** The largest shard the config allows (`shard_size`); the plan may cut smaller ones. */
  shardSize: number;
  /** Bytes of the episode config (JSON): every episode activity and every shard carries it. */
  episodeBytes: number;
  /** Bytes of the stage workflow's input (its uid list dominates); each shard's input carries its share of it. */
  inputBytes: number;
  budget?: HistorySize;
}

export interface StagePlan {
  /** Keys per shard: the config's `shard_size`, or fewer where a shard of that size could outgrow the budget. */
  shardSize: number;
  /** Shards per pass over the keys. */
  shards: number;
  /** Most shards one run of the stage's workflow starts; past them it continues as new (between shards). */
  shardStartsPerRun: number;
  /** Runs of the stage's workflow at worst (every outage wait taken). */
  runs: number;
  /** Worst case of the largest shard, and of the largest run of the stage's workflow. */
  shard: HistorySize;
  stage: HistorySize;
  budget: HistorySize;
  /** What the plan cut, in words (empty: nothing). */
  cuts: string[];
}

/** A stage that cannot fit the budget however it is cut: the workflow refuses it before it starts. */
export class HistoryBudgetError extends Error {
  override readonly name = 'HistoryBudgetError';
}

/**
 * Slot hand-over signals of one shard run as a lane (episode-shard-workflow.ts): it gives slots back at most once at
 * start, once per key done and once per slot signal received, and, since the slots it holds never exceed the bound
 * and each give-back but the last returns a batch, at most bound/batch + 1 times (one more for a race); it receives
 * slots only while short of them, at least one each time, and never more than the bound or its keys plus a batch.
 */
function laneSignals(shape: StageShape, keyCount: number): { sent: number; received: number } {
  const batch = laneGiveBackBatch(shape.concurrency);
  const received = Math.min(shape.concurrency, keyCount + batch) + 1;
  const sent = Math.min(Math.floor(shape.concurrency / batch) + 2, 1 + keyCount + received);
  return { sent, received };
}

/** Bytes of a shard's input: the episode config, its share of the stage's uids, the rest of the stage's fields. */
function shardInputBytes(shape: StageShape, keyCount: number): number {
  return shape.episodeBytes + Math.ceil((shape.inputBytes * keyCount) / Math.max(1, shape.keys)) + 1024;
}

/** Worst case of one shard of `keyCount` keys. */
export function shardHistory(shape: StageShape, keyCount: number): HistorySize {
  const attempts = keyCount * (1 + shape.maxReruns);
  const { sent, received } = laneSignals(shape, keyCount);
  const events =
    shardOwnEvents +
    attempts * attemptEvents +
    keyCount * shape.maxReruns * timerEvents +
    sent * signalSentEvents +
    received * signalReceivedEvents;
  const payloads = shardInputBytes(shape, keyCount) + attempts * (shape.episodeBytes + episodeIdsBytes + failureBytes);
  return { events, bytes: events * eventBytes + payloads };
}

/**
 * What starting one shard of `keyCount` keys adds to the stage's history at worst: its start and end, the slots it
 * gives back, and as many sends of slots (the stage sends only slots given back to it, one send per give-back at
 * most, plus one that fails when the shard it went to has ended).
 */
export function stageHistoryPerShard(shape: StageShape, keyCount: number): HistorySize {
  const { sent } = laneSignals(shape, keyCount);
  const events = childEvents + sent * signalReceivedEvents + (sent + 1) * signalSentEvents;
  return { events, bytes: events * eventBytes + shardInputBytes(shape, keyCount) + shardStartBytes };
}

/** A stage run's own history at worst, before any shard: its input (twice: the aggregation gets the uids too). */
export function stageHistoryOwn(shape: StageShape): HistorySize {
  const events = stageOwnEvents + shape.outageWaits * timerEvents;
  return { events, bytes: events * eventBytes + 2 * shape.inputBytes + stageOwnBytes };
}

const within = (a: HistorySize, b: HistorySize) => a.events <= b.events && a.bytes <= b.bytes;
const size = (h: HistorySize) => `${h.events} events, ${(h.bytes / 1024 / 1024).toFixed(1)} MiB`;

/**
 * The cut of a stage that keeps each of its workflows under the budget at worst: the largest shards up to the
 * config's size that fit, and the most shard starts per run of the stage's workflow that fit beside its own events.
 * Throws HistoryBudgetError when even a one-key shard, or a run with one shard, would outgrow the budget.
 */
export function planStage(shape: StageShape): StagePlan {
  const budget = shape.budget ?? defaultHistoryBudget;
  for (const [name, value, min] of [
    ['keys', shape.keys, 0],
    ['concurrency', shape.concurrency, 1],
    ['maxReruns', shape.maxReruns, 0],
    ['outageWaits', shape.outageWaits, 0],
    ['shardSize', shape.shardSize, 1],
  ] as const)
    if (!Number.isInteger(value) || value < min)
      throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
  const refuse = (why: string) =>
    new HistoryBudgetError(
      `a stage of ${shape.keys} keys (${shape.maxReruns} re-runs, ${shape.outageWaits} outage waits, bound ` +
        `${shape.concurrency}) cannot stay within the history budget of ${size(budget)} per workflow ` +
        `(Temporal's limit: ${size(temporalHistoryLimit)}): ${why}`,
    );
  const largest = Math.max(1, Math.min(shape.shardSize, shape.keys));
  if (!within(shardHistory(shape, 1), budget))
    throw refuse(`a shard of one key alone records up to ${size(shardHistory(shape, 1))}`);
  // The estimate grows with the keys: the largest shard that fits, by bisection.
  let [fits, outgrows] = [1, largest + 1];
  while (outgrows - fits > 1) {
    const mid = Math.floor((fits + outgrows) / 2);
    if (within(shardHistory(shape, mid), budget)) fits = mid;
    else outgrows = mid;
  }
  const shardSize = fits;
  const shards = Math.ceil(shape.keys / shardSize);
  const own = stageHistoryOwn(shape);
  const perShard = stageHistoryPerShard(shape, shardSize);
  const shardStartsPerRun = Math.min(
    Math.floor((budget.events - own.events) / perShard.events),
    Math.floor((budget.bytes - own.bytes) / perShard.bytes),
  );
  if (shardStartsPerRun < 1)
    throw refuse(`the stage's own history (${size(own)}, its input included) leaves no room for a shard`);
  const starts = shards * (1 + shape.outageWaits);
  const runs = Math.max(1, Math.ceil(starts / shardStartsPerRun));
  const runStarts = Math.min(starts, shardStartsPerRun);
  const cuts: string[] = [];
  if (shardSize < shape.shardSize && shardSize < shape.keys)
    cuts.push(`shards of ${shardSize} keys instead of ${shape.shardSize}`);
  if (runs > 1) cuts.push(`continues as new after every ${shardStartsPerRun} shards (${runs} runs at worst)`);
  return {
    shardSize,
    shards,
    shardStartsPerRun,
    runs,
    shard: shardHistory(shape, Math.min(shardSize, Math.max(1, shape.keys))),
    stage: { events: own.events + runStarts * perShard.events, bytes: own.bytes + runStarts * perShard.bytes },
    budget,
    cuts,
  };
}

import { defineSignal } from '@temporalio/workflow';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import type { InfraBackoff } from './activity-options.ts';
import type { HistorySize } from './history-budget.ts';

/**
 * Inputs and results of the sharded episode runner (keyed-episodes.ts) and of its shards
 * (episode-shard-workflow.ts), apart from both so that neither file imports the other for its types.
 */

export interface KeyedEpisodesInput {
  idPrefix: string;
  uids: string[];
  repeats: number;
  suiteDir: string;
  episode: EpisodeConfig;
  purpose: EpisodeActivityInput['purpose'];
  campaignId: string;
  rolloutQueue: string;
  /** Episodes in flight across the whole stage. */
  concurrency: number;
  /** Keys per shard (child workflow); default `defaultShardSize` (inputs recorded before the field existed). */
  shardSize?: number;
  maxReruns: number;
  /** Backoff before each re-run of an infrastructure-errored key (default: activity-options.ts). */
  infraBackoff?: InfraBackoff;
  /** Search attribute TbtStage of the shards (default: the parent's). */
  stage?: string;
  /** History budget per workflow of the stage (default: history-budget.ts); tests set a small one to see the cut. */
  historyBudget?: HistorySize;
}

export interface ShardInput extends Omit<KeyedEpisodesInput, 'shardSize' | 'stage' | 'historyBudget'> {
  keyOffset: number;
  keyCount: number;
  /** A lane of the stage's one bound (keyed-episodes.ts): the slots it starts with, instead of `concurrency`.
   * It gives the stage back every slot beyond its unfinished keys and takes more by `shardSlotsSignal`. */
  laneSlots?: number;
}

/** Stage -> shard lane: more slots. */
export const shardSlotsSignal = defineSignal<[number]>('tbtShardSlots');
/** Shard lane -> its stage: slots it no longer needs. */
export const stageSlotsSignal = defineSignal<[{ shard: string; slots: number }]>('tbtStageSlots');

/** Slots a lane gives back at once (fewer signals, a few slots idle at most), but a lane's last ones all go. */
export const laneGiveBackBatch = (concurrency: number) => Math.max(1, Math.floor(concurrency / 32));

export interface ShardSummary {
  keys: number;
  /** Episodes run, re-runs included. */
  episodes: number;
  reruns: number;
  /** Keys whose last attempt is still an infrastructure error. */
  uncovered: number;
  /** Up to 3 `key: cause` lines of uncovered keys. */
  uncoveredSamples: string[];
  /** Most episodes in flight at once. */
  peakInFlight: number;
  /** Keys that ended in a task error (their test code raised twice); absent in results of older code. */
  taskErrors?: number;
  /** Each task with a task error once, with its cause, at most taskErrorTasksKept. */
  taskErrorTasks?: TaskErrorTask[];
}

/** A task whose test code raised twice, and why (the episode's cause). */
export interface TaskErrorTask {
  uid: string;
  cause: string;
}

/** Tasks with task errors a stage names (a dataset with more is named by the aggregate and the report). */
export const taskErrorTasksKept = 20;

/** Adds a key of `uid` that ended in a task error to `summary` (its task named once, within the cap). */
export function countTaskError(summary: ShardSummary, uid: string, cause: string | undefined): void {
  summary.taskErrors = (summary.taskErrors ?? 0) + 1;
  nameTask(summary, { uid, cause: cause ?? 'task error' });
}

/** Adds a shard's task errors to its stage's summary. */
export function addTaskErrors(total: ShardSummary, shard: ShardSummary): void {
  if (!shard.taskErrors) return;
  total.taskErrors = (total.taskErrors ?? 0) + shard.taskErrors;
  for (const task of shard.taskErrorTasks ?? []) nameTask(total, task);
}

function nameTask(summary: ShardSummary, task: TaskErrorTask): void {
  const tasks = (summary.taskErrorTasks ??= []);
  if (tasks.length < taskErrorTasksKept && !tasks.some((t) => t.uid === task.uid)) tasks.push(task);
}

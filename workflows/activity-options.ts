import type { ActivityOptions } from '@temporalio/workflow';

type Duration = NonNullable<ActivityOptions['startToCloseTimeout']>;
import { nonRetryableErrorTypes } from '../core/errors.ts';

/**
 * Every retry and timeout profile of the workflows, in one place. Bad input never retries (the list comes from
 * core/errors.ts); everything else retries with exponential backoff within the bounds stated here.
 */

/**
 * Bookkeeping activities (ingest, prepare, record, aggregate, report) on the orchestrator. They heartbeat every
 * 10 s (activities/campaign-activities.ts), so a worker killed mid-activity is noticed within a minute and the
 * activity retried elsewhere, instead of after the start-to-close limit.
 */
export function bookkeepingOptions(startToCloseTimeout: Duration, maximumAttempts: number): ActivityOptions {
  return {
    startToCloseTimeout,
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts, initialInterval: '2 seconds', maximumInterval: '1 minute', nonRetryableErrorTypes },
  };
}

/** How long a GPU activity waits for a poller when the config does not say (inputs recorded before it did). */
export const defaultGpuQueueWaitMs = 30 * 60_000;

/**
 * GPU activities (learner start, training step, export, weight sync, policy server). Every one heartbeats at
 * least every 10 s. A task nobody picks up within the schedule-to-start limit (`recovery.gpu_queue_wait_ms`,
 * default 30 minutes) fails visibly, naming the queue (missing-poller.ts), and the campaign pauses on it instead
 * of waiting silently; retries: 10 attempts, 5 s doubling to at most 2 minutes (about 13 min).
 */
export function gpuOptions(
  taskQueue: string,
  startToCloseTimeout: Duration,
  queueWaitMs: number = defaultGpuQueueWaitMs,
): ActivityOptions {
  return {
    taskQueue,
    startToCloseTimeout,
    scheduleToStartTimeout: queueWaitMs,
    heartbeatTimeout: '2 minutes',
    retry: { maximumAttempts: 10, initialInterval: '5 seconds', maximumInterval: '2 minutes', nonRetryableErrorTypes },
  };
}

/**
 * How long the rollout and bookkeeping queues may go without a poller while a stage waits on them, when the config
 * does not say (inputs recorded before it did): `recovery.rollout_queue_wait_ms`, `bookkeeping_queue_wait_ms`.
 */
export const defaultRolloutQueueWaitMs = 30 * 60_000;
export const defaultBookkeepingQueueWaitMs = 15 * 60_000;

/**
 * The queue watch's look at Temporal (workflows/queue-watch.ts), on the bookkeeping queue: one quick call, never
 * retried (a failed look is only skipped). Nobody taking it within the bookkeeping queue's wait is how that queue's
 * missing poller shows.
 */
export function queueLookOptions(bookkeepingWaitMs: number): ActivityOptions {
  return {
    scheduleToStartTimeout: bookkeepingWaitMs,
    startToCloseTimeout: '30 seconds',
    retry: { maximumAttempts: 1, nonRetryableErrorTypes },
  };
}

/**
 * Episode activities on the rollout queue. The episode enforces its own wall clock; the activity gets that plus
 * room for set-up and grading. It heartbeats every 5 s and per turn, so a killed rollout worker's episodes are
 * retried within 90 s. 5 attempts, 2 s doubling (2+4+8+16 = 30 s of backoff).
 */
export function episodeActivityOptions(rolloutQueue: string, wallClockMs: number): ActivityOptions {
  return {
    taskQueue: rolloutQueue,
    startToCloseTimeout: wallClockMs + 5 * 60_000,
    heartbeatTimeout: '90 seconds',
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', backoffCoefficient: 2, nonRetryableErrorTypes },
  };
}

/**
 * A one-off question to the policy server from the rollout queue (how its template takes system messages): a
 * few seconds of work; 10 attempts, 5 s doubling to at most 1 minute, so a server still starting is waited for
 * (about 6 minutes) before the stage fails with the server's own error.
 */
export function policyQuestionOptions(rolloutQueue: string): ActivityOptions {
  return {
    taskQueue: rolloutQueue,
    startToCloseTimeout: '2 minutes',
    scheduleToStartTimeout: '30 minutes',
    retry: { maximumAttempts: 10, initialInterval: '5 seconds', maximumInterval: '1 minute', nonRetryableErrorTypes },
  };
}

/**
 * Backoff of the workflows' own re-runs: before re-running a key whose episode ended in an infrastructure error,
 * before refilling a group, and before retrying a training step that lost every group. Delay n (n = 1, 2, ...) is
 * initialMs x 2^(n-1), capped at maxMs. With the defaults, 3 re-runs wait 10 + 20 + 40 s after the activity's own
 * 30 s of retries: an outage of about 1.5 minutes is covered without losing a key.
 */
export interface InfraBackoff {
  initialMs: number;
  maxMs: number;
}
export const defaultInfraBackoff: InfraBackoff = { initialMs: 10_000, maxMs: 5 * 60_000 };

export function infraBackoffMs(retry: number, backoff: InfraBackoff = defaultInfraBackoff): number {
  return Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.max(0, retry - 1));
}

/** Re-runs of a key after infrastructure errors (probe, evaluation) before it counts as uncovered. */
export const defaultMaxReruns = 3;

/** Retries of a training step that lost every group to infrastructure errors, before the campaign pauses. */
export const lostStepRetries = 3;

/**
 * How long a stage paused by an infrastructure failure waits before it runs again by itself: retry n (n = 1, 2,
 * ...) waits `paused_stage_retry_ms` x 2^(n-1), capped at `paused_stage_retry_max_ms` (defaults 5 minutes, then
 * 10, 20, 40, 60, 60, ...). A resume runs it at once. Configs recorded before `recovery` existed get the defaults.
 */
export function pausedStageRetryMs(
  retry: number,
  recovery: { paused_stage_retry_ms: number; paused_stage_retry_max_ms: number } | undefined,
): number {
  const initial = recovery?.paused_stage_retry_ms ?? 5 * 60_000;
  const max = recovery?.paused_stage_retry_max_ms ?? 60 * 60_000;
  return Math.min(max, initial * 2 ** Math.max(0, retry - 1));
}

/**
 * How often a probe or an evaluation waits out an outage before its keys count as uncovered (outage-waits.ts),
 * spaced as a paused stage's retries: a campaign's probe 2 times (5 + 10 minutes by default: its selection must
 * not lose tasks to a short outage), an evaluation outside a campaign 4 times (75 minutes; a campaign's own
 * evaluation waits none, the campaign pauses instead, visibly).
 */
export function outageWaits(
  recovery: { paused_stage_retry_ms: number; paused_stage_retry_max_ms: number } | undefined,
  waits: number,
): { waits: number; initialMs: number; maxMs: number } {
  return {
    waits,
    initialMs: recovery?.paused_stage_retry_ms ?? 5 * 60_000,
    maxMs: recovery?.paused_stage_retry_max_ms ?? 60 * 60_000,
  };
}

/** Training steps in a row whose update was skipped as non-finite before the campaign pauses itself. */
export const nonFiniteStepsBeforePause = 3;

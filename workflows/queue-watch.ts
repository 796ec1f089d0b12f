import {
  ActivityFailure,
  CancellationScope,
  condition,
  isCancellation,
  log,
  proxyActivities,
  sleep,
  TimeoutFailure,
} from '@temporalio/workflow';
import type { QueueWatchActivities } from '../activities/queue-watch-activities.ts';
import { queueLookOptions } from './activity-options.ts';

/**
 * Watches the rollout and bookkeeping queues while a campaign stage waits on them. A GPU activity has a
 * schedule-to-start limit (activity-options.ts), but an episode may rightly wait for hours behind a full rollout
 * queue, so a missing poller is told from a busy queue by asking Temporal: a look (an activity on the bookkeeping
 * queue) lists the rollout queue's pollers, and a rollout queue that lists none for a whole wait counts as missing.
 * A worker whose every slot is taken does not poll, and the server forgets a poller 5 minutes after its last poll;
 * so the rollout wait must cover one episode (the caller keeps it at least `episode.limits.wall_clock_ms`: a slot
 * frees within wall clock + 5 min). The bookkeeping queue counts as missing when nobody takes a look within its
 * wait. A look that fails otherwise (a worker without it) is skipped: the queues go unwatched, nothing pauses.
 */

export interface WatchedQueue {
  /** What the queue is for, as the pause reason names it. */
  role: 'rollout' | 'bookkeeping';
  name: string;
  /** How long the queue may go without a poller before it counts as missing. */
  waitMs: number;
}

export interface QueueWatch {
  /** The queue the looks run on (the bookkeeping queue, the workflow's own). */
  lookQueue: WatchedQueue;
  /** The queues each look asks Temporal about. */
  asked: WatchedQueue[];
  /** Called after every look that got an answer, with the queues missing a poller (none: []). */
  onLook(missing: WatchedQueue[]): void;
  /** A number the caller bumps (a resume) to start every queue's wait over. */
  epoch(): number;
  /** True when the work is to be given up (a stop while paused on a missing queue): it is then cancelled. */
  abandon(): boolean;
}

/**
 * Looks half the shortest wait apart (at least 1 s, at most 15 min): a queue is noticed within 1.5 waits, and a
 * look costs the campaign's history about 11 events, about 90 an hour with the default waits.
 */
export function lookIntervalMs(queues: WatchedQueue[]): number {
  const shortest = Math.min(...queues.map((q) => q.waitMs));
  return Math.min(15 * 60_000, Math.max(1000, Math.floor(shortest / 2)));
}

/**
 * Runs `work` while the queues are watched. Nothing of `work` is cancelled or re-run because of a missing queue: its
 * activities stay scheduled and run once a worker polls. Only `abandon()` cancels it (then `{ abandoned: true }`).
 */
export async function watchingQueues<T>(
  watch: QueueWatch,
  work: () => Promise<T>,
): Promise<{ value: T } | { abandoned: true }> {
  const workScope = new CancellationScope();
  const watchScope = new CancellationScope();
  let abandoned = false;
  const working = workScope.run(work);
  const watching = watchScope.run(() =>
    Promise.all([
      look(watch),
      condition(watch.abandon).then(() => {
        abandoned = true;
        workScope.cancel();
      }),
    ]),
  );
  try {
    // A bug in the watch fails the stage as one in the work would; the watch itself never ends.
    return { value: await Promise.race([working, watching.then(() => working)]) };
  } catch (err) {
    if (abandoned) return { abandoned: true };
    throw err;
  } finally {
    watchScope.cancel();
  }
}

/** Nobody took the look from its queue within the schedule-to-start limit. */
function notTaken(err: unknown): boolean {
  return (
    err instanceof ActivityFailure &&
    err.cause instanceof TimeoutFailure &&
    err.cause.timeoutType === 'SCHEDULE_TO_START'
  );
}

async function look(watch: QueueWatch): Promise<void> {
  const { lookQueue, asked } = watch;
  const { taskQueuePollers } = proxyActivities<QueueWatchActivities>(queueLookOptions(lookQueue.waitMs));
  const names = [...new Set(asked.map((q) => q.name))];
  const emptySince = new Map<string, number>();
  const interval = lookIntervalMs([lookQueue, ...asked]);
  let epoch = watch.epoch();
  let warned = false;
  for (;;) {
    const answer = await taskQueuePollers({ queues: names }).then(
      (pollers) => ({ pollers }),
      (err: unknown) => {
        if (isCancellation(err)) throw err;
        if (notTaken(err)) return { notTaken: true };
        // A worker without the look (an older one, a test's) leaves the queues unwatched, not the campaign failed.
        if (!warned) log.warn("could not ask Temporal for the queues' pollers", { queues: names, error: String(err) });
        warned = true;
        return undefined;
      },
    );
    if (watch.epoch() !== epoch) {
      epoch = watch.epoch();
      emptySince.clear();
      // A resume gives every queue a full wait again, the look's own queue included: the answer is not used.
      continue;
    }
    if (answer && 'notTaken' in answer) {
      // The look waited the bookkeeping queue's whole wait: ask again at once, so a returning worker is seen soon.
      watch.onLook([lookQueue]);
      continue;
    }
    if (answer) {
      const now = Date.now();
      names.forEach((name, i) => {
        if ((answer.pollers[i] ?? 0) > 0) emptySince.delete(name);
        else if (!emptySince.has(name)) emptySince.set(name, now);
      });
      watch.onLook(
        asked.filter((q) => {
          const since = emptySince.get(q.name);
          return since !== undefined && now - since >= q.waitMs;
        }),
      );
    }
    await sleep(interval);
  }
}

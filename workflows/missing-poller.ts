import { ActivityFailure, ApplicationFailure, TimeoutFailure } from '@temporalio/workflow';
import { waitInWords } from './ui-text.ts';

/** Failure type of an activity nobody picked up within its schedule-to-start limit. */
export const noWorkerPollingType = 'NoWorkerPollingTaskQueue';

/**
 * An activity's schedule-to-start timeout means no worker took the task from its queue in time: a GPU worker that
 * is down, or one polling another queue. The bare "activity timed out" is replaced by a failure that names the
 * queue and the activity (the original stays as its cause); every other error passes through unchanged.
 */
export function explainMissingPoller(err: unknown, taskQueue: string, activity: string): unknown {
  if (!(err instanceof ActivityFailure && err.cause instanceof TimeoutFailure)) return err;
  if (err.cause.timeoutType !== 'SCHEDULE_TO_START') return err;
  return ApplicationFailure.create({
    type: noWorkerPollingType,
    nonRetryable: true,
    message:
      `no worker polls task queue "${taskQueue}": activity ${activity} waited its schedule-to-start limit without ` +
      `being picked up. Start the worker for that queue (\`tbt workers up\`; a GPU queue is ` +
      `<TBT_TASK_QUEUE_PREFIX>-gpu-<host>) or check the configured queue name`,
    cause: err,
  });
}

/** The activities of `activities` (a proxyActivities object) with schedule-to-start timeouts explained. */
export function withMissingPollerNamed<A extends object>(activities: A, taskQueue: string): A {
  return new Proxy(activities, {
    get(target, name) {
      const fn = Reflect.get(target, name) as unknown;
      if (typeof fn !== 'function' || typeof name !== 'string') return fn;
      return async (...args: unknown[]) => {
        try {
          return await (fn as (...a: unknown[]) => Promise<unknown>)(...args);
        } catch (err) {
          throw explainMissingPoller(err, taskQueue, name);
        }
      };
    },
  });
}

/**
 * Why the campaign paused while `what` waits on a rollout or bookkeeping queue that no worker polled for `waitMs`
 * (queue-watch.ts): the queue, its worker, and how the pause ends. Worded as explainMissingPoller, so that the CLI
 * and a search for the queue's name find both.
 */
export function missingPollerReason(what: string, queue: string, role: string, waitMs: number): string {
  const unseen = role === 'bookkeeping' ? 'took a task from' : 'polled';
  return (
    `no worker polls task queue "${queue}" (the ${role} queue): none ${unseen} it for ${waitInWords(waitMs)} while ` +
    `${what} waited on it. Start the ${role} worker (\`tbt workers up\`) or check the configured queue name; ` +
    `${what} goes on by itself once a worker polls. \`tbt campaign resume\` clears this pause; it comes back if ` +
    `the queue still has no poller ${waitInWords(waitMs)} later`
  );
}

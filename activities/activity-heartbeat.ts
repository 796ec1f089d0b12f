import { Context } from '@temporalio/activity';

/** The running activity's context, or undefined when called outside an activity (tests, tools). */
export function currentActivity(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}

/** Heartbeats every 10 s while `work` runs, so a dead worker is noticed at the heartbeat timeout. */
export async function heartbeating<T>(work: () => Promise<T>, details: () => unknown = () => ({})): Promise<T> {
  const ctx = Context.current();
  const beat = setInterval(() => ctx.heartbeat(details()), 10_000);
  try {
    return await work();
  } finally {
    clearInterval(beat);
  }
}

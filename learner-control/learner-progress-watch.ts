import { InfrastructureError } from '../core/errors.ts';
import { learnerRequest, type LearnerEndpoint } from './learner-client.ts';
import { stopLearner, type LearnerFiles } from './learner-process.ts';

/**
 * Watches a running training step through the learner's own progress (GET /health `progress`,
 * gpu-learner/tbt_gpu/learner/progress.py) every 5 s. A step whose progress has not changed (no new micro-batch,
 * no phase change) for `limitMs` is a hung collective or a stuck device, which no HTTP error or process exit would
 * ever report: the learner is stopped, so that the activity's retry restarts it from its last checkpoint, and the
 * watch fails with the reason.
 */

export interface LearnerProgress {
  step: number | null;
  phase: string;
  micro_batch: number;
  of: number;
  seconds_since_change: number;
}

/** Generous: one micro-batch of a large model with offloading can take minutes. */
export const defaultStallLimitMs = 20 * 60_000;

export interface ProgressWatch {
  /** The last progress the learner reported (for heartbeats). */
  latest(): LearnerProgress | undefined;
  /** Rejects once the step stalled, after the learner was stopped; never resolves. */
  stalled: Promise<never>;
  /** The stall, if there was one, once the learner is stopped (a failed step request may come first). */
  stallError(): Promise<InfrastructureError | undefined>;
  stop(): void;
}

export function watchLearnerProgress(
  learner: LearnerEndpoint,
  files: LearnerFiles,
  stepId: number,
  limitMs = defaultStallLimitMs,
): ProgressWatch {
  let latest: LearnerProgress | undefined;
  let stall: Promise<InfrastructureError> | undefined;
  let polling = false;
  let fail: (err: Error) => void = () => {};
  const stalled = new Promise<never>((_, reject) => (fail = reject));
  stalled.catch(() => undefined);
  const poll = setInterval(async () => {
    if (polling || stall) return;
    polling = true;
    try {
      latest = (await learnerRequest<{ progress?: LearnerProgress }>(learner, 'GET', '/health', undefined, 5000))
        .progress;
    } catch {
      return; // an unreachable learner fails the step request itself
    } finally {
      polling = false;
    }
    if (!latest || latest.step !== stepId || latest.phase === 'idle') return;
    if (latest.seconds_since_change * 1000 <= limitMs) return;
    clearInterval(poll);
    const where = `${latest.phase}, micro-batch ${latest.micro_batch} of ${latest.of}`;
    const error = new InfrastructureError(
      `learner made no progress on step ${stepId} for ${Math.round(latest.seconds_since_change)} s (${where}): ` +
        `a hung collective or a stuck device; the learner was stopped and the retry restarts it from its last ` +
        `checkpoint`,
    );
    stall = stopLearner(files)
      .catch(() => undefined)
      .then(() => error);
    fail(await stall);
  }, 5000);
  return {
    latest: () => latest,
    stalled,
    stallError: async () => (stall ? await stall : undefined),
    stop: () => clearInterval(poll),
  };
}

import { CancelledFailure } from '@temporalio/common';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { metrics } from '../infra/metrics.ts';
import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { campaignLearner } from './campaign-learner.ts';
import { learnerRequest, rethrowRefusalAsBadInput } from './learner-client.ts';
import { learnerFiles, runningLearnerNodes } from './learner-process.ts';
import { watchLearnerProgress, type LearnerProgress, type ProgressWatch } from './learner-progress-watch.ts';
import { writeStepBatch, type BatchItem } from './step-batch.ts';

/**
 * One training step on the campaign's learner: the batch file is written, the learner ensured (a learner that
 * died, by kill -9 or OOM, is restarted from its last checkpoint; the step id makes the retry exact), and the
 * step applied under a watch that reports progress and passes a cancellation on to the learner.
 */

export interface TrainStepInput {
  campaignId: string;
  stepId: number;
  items: BatchItem[];
  learner: CampaignConfig['learner'];
  samplingTemperature?: number;
}

export interface TrainStepResult {
  stepId: number;
  repeated: boolean;
  checkpoint: string;
  metrics: Record<string, unknown>;
  /**
   * For a step the learner had applied already: whether the batch offered this time holds the episodes it trained
   * (null: the learner could not tell). Absent for a fresh step, and in results recorded before it was asked.
   */
  batchMatches?: boolean | null;
  /** The episode ids the learner trained (sorted), only when `batchMatches` is false and the learner kept them. */
  trainedEpisodeIds?: string[];
}

/** The learner's answer to POST /train_step (gpu-learner/tbt_gpu/learner/control.py). */
interface TrainStepAnswer {
  step_id: number;
  result: Record<string, unknown>;
  repeated: boolean;
  checkpoint: string;
  batch_matches?: boolean | null;
  trained_batch_ids?: string[];
}

/** What the caller (the trainStep activity) lends a step: progress reports, its cancellation and its log. */
export interface StepWatch {
  /** Called every 5 s while the step runs, with the learner's progress once it has answered a poll. */
  progress(details: { stepId: number; seconds: number; learner?: LearnerProgress }): void;
  /** Rejects when the step is cancelled; the learner is then asked to cancel it too. */
  cancelled: Promise<never>;
  log: { info(message: string, meta: Record<string, unknown>): void };
}

export async function trainLearnerStep(
  deps: { stateDir: string; controlUrl: string; stallLimitMs?: number },
  input: TrainStepInput & { seed: number },
  watch: StepWatch,
): Promise<TrainStepResult> {
  const files = learnerFiles(deps.stateDir, input.campaignId);
  const started = Date.now();
  let progress: ProgressWatch | undefined;
  const beat = setInterval(() => {
    const seconds = Math.round((Date.now() - started) / 1000);
    const learner = progress?.latest();
    watch.progress({ stepId: input.stepId, seconds, ...(learner ? { learner } : {}) });
  }, 5000);
  try {
    const batchRef = await writeStepBatch(deps.controlUrl, files.dir, input.stepId, input.items);
    // A learner released between steps (learner.release_outside_training) starts here: its start-up is timed.
    const startedHere = runningLearnerNodes(files) === 0 && input.learner.attach_url === undefined;
    const asked = Date.now();
    const learner = await campaignLearner(deps.stateDir, input);
    const learnerStartS = startedHere ? Math.round((Date.now() - asked) / 100) / 10 : undefined;
    if (learnerStartS !== undefined)
      watch.log.info('learner started for the step', {
        campaignId: input.campaignId,
        stepId: input.stepId,
        learnerStartS,
      });
    const cancelled = watch.cancelled.catch(async (err: unknown) => {
      // A worker being replaced (a deploy, a restart) leaves the learner's step running: the learner is its own
      // process, and the retry on the next worker waits for the same step's answer (a step id the learner is
      // running or has stored is answered, never run twice). Any other cancellation reaches the learner.
      if (!(err instanceof CancelledFailure && err.message === 'WORKER_SHUTDOWN'))
        await learnerRequest(learner, 'POST', '/cancel', {}, 10_000).catch(() => undefined);
      throw err;
    });
    progress = watchLearnerProgress(learner, files, input.stepId, deps.stallLimitMs);
    try {
      const answer = await Promise.race([
        learnerRequest<TrainStepAnswer>(
          learner,
          'POST',
          '/train_step',
          { step_id: input.stepId, batch_ref: batchRef },
          3 * 3600_000,
        ),
        cancelled,
        progress.stalled,
      ]);
      const seconds = (Date.now() - started) / 1000;
      watch.log.info('learner step done', {
        campaignId: input.campaignId,
        stepId: answer.step_id,
        repeated: answer.repeated,
        episodes: input.items.length,
        seconds,
        ...(answer.batch_matches === undefined ? {} : { batchMatches: answer.batch_matches }),
      });
      metrics.learnerStepFinished(seconds, answer.repeated);
      // Retention: batches of committed steps and all but the last exports go (tbt gc does the same).
      pruneLearnerFolder(files.dir, defaultRetention);
      return {
        stepId: answer.step_id,
        repeated: answer.repeated,
        checkpoint: answer.checkpoint,
        metrics: learnerStartS === undefined ? answer.result : { ...answer.result, learner_start_s: learnerStartS },
        ...trainedBatch(answer),
      };
    } catch (err) {
      // Stopping a stalled learner also fails its step request: the stall is the reason to report.
      throw (await progress.stallError()) ?? rethrowRefusalAsBadInput(err);
    }
  } finally {
    clearInterval(beat);
    progress?.stop();
  }
}

/** What the learner says of the batch a step it had applied was offered again; nothing for a fresh step. */
function trainedBatch(answer: TrainStepAnswer): Pick<TrainStepResult, 'batchMatches' | 'trainedEpisodeIds'> {
  if (answer.batch_matches === undefined) return {};
  const ids = answer.batch_matches === false ? answer.trained_batch_ids : undefined;
  return { batchMatches: answer.batch_matches, ...(ids ? { trainedEpisodeIds: ids } : {}) };
}

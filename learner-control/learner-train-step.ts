import type { CampaignConfig } from '../config/campaign-config.ts';
import { metrics } from '../infra/metrics.ts';
import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { campaignLearner } from './campaign-learner.ts';
import { learnerRequest, rethrowRefusalAsBadInput } from './learner-client.ts';
import { learnerFiles } from './learner-process.ts';
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
}

/** What the caller (the trainStep activity) lends a step: progress reports, its cancellation and its log. */
export interface StepWatch {
  /** Called every 5 s while the step runs. */
  progress(details: { stepId: number; seconds: number }): void;
  /** Rejects when the step is cancelled; the learner is then asked to cancel it too. */
  cancelled: Promise<never>;
  log: { info(message: string, meta: Record<string, unknown>): void };
}

export async function trainLearnerStep(
  deps: { stateDir: string; controlUrl: string },
  input: TrainStepInput & { seed: number },
  watch: StepWatch,
): Promise<TrainStepResult> {
  const dir = learnerFiles(deps.stateDir, input.campaignId).dir;
  const started = Date.now();
  const beat = setInterval(
    () => watch.progress({ stepId: input.stepId, seconds: Math.round((Date.now() - started) / 1000) }),
    5000,
  );
  try {
    const batchRef = await writeStepBatch(deps.controlUrl, dir, input.stepId, input.items);
    const learner = await campaignLearner(deps.stateDir, input);
    const cancelled = watch.cancelled.catch(async (err: unknown) => {
      await learnerRequest(learner, 'POST', '/cancel', {}, 10_000).catch(() => undefined);
      throw err;
    });
    try {
      const answer = await Promise.race([
        learnerRequest<{ step_id: number; result: Record<string, unknown>; repeated: boolean; checkpoint: string }>(
          learner,
          'POST',
          '/train_step',
          { step_id: input.stepId, batch_ref: batchRef },
          3 * 3600_000,
        ),
        cancelled,
      ]);
      const seconds = (Date.now() - started) / 1000;
      watch.log.info('learner step done', {
        campaignId: input.campaignId,
        stepId: answer.step_id,
        repeated: answer.repeated,
        episodes: input.items.length,
        seconds,
      });
      metrics.learnerStepFinished(seconds, answer.repeated);
      // Retention: batches of committed steps and all but the last exports go (tbt gc does the same).
      pruneLearnerFolder(dir, defaultRetention);
      return {
        stepId: answer.step_id,
        repeated: answer.repeated,
        checkpoint: answer.checkpoint,
        metrics: answer.result,
      };
    } catch (err) {
      return rethrowRefusalAsBadInput(err);
    }
  } finally {
    clearInterval(beat);
  }
}

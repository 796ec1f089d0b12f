import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { lastLaunchedLearner } from './campaign-learner.ts';
import { learnerRequest, rethrowRefusalAsBadInput } from './learner-client.ts';
import { learnerFiles } from './learner-process.ts';

/**
 * Asks the campaign's learner for a serving copy of a step's weights (a safetensors folder the policy servers
 * load) and returns its path; all but the last exports are then pruned.
 */
export async function exportLearnerWeights(stateDir: string, campaignId: string, stepId: number): Promise<string> {
  const learner = await lastLaunchedLearner(stateDir, campaignId);
  try {
    const answer = await learnerRequest<{ path: string }>(learner, 'POST', '/export', { step_id: stepId }, 30 * 60_000);
    pruneLearnerFolder(learnerFiles(stateDir, campaignId).dir, defaultRetention);
    return answer.path;
  } catch (err) {
    return rethrowRefusalAsBadInput(err);
  }
}

import { lastLaunchedLearner } from './campaign-learner.ts';
import { learnerRequest } from './learner-client.ts';
import type { CollectivePush } from './policy-weight-sync.ts';

/**
 * The campaign learner's end of a collective weight sync: rank 0 hosts the group's store on its own address (so a
 * server must reach the learner's control host; a loopback learner reaches local servers only) and sends the
 * step's weights to the server that joins. A push the server never joins fails after `timeoutS`.
 */
export async function learnerWeightPush(
  stateDir: string,
  campaignId: string,
  stepId: number,
  timeoutS = 60,
): Promise<CollectivePush> {
  const learner = await lastLaunchedLearner(stateDir, campaignId);
  const host = new URL(learner.url).hostname;
  const manifest = await learnerRequest<{ distributed: { device: string } }>(learner, 'GET', '/manifest');
  const backend = manifest.distributed.device === 'cuda' ? 'nccl' : 'gloo';
  return {
    host: host === '0.0.0.0' ? '127.0.0.1' : host,
    timeoutS,
    backend,
    push: (host, port, seconds) =>
      learnerRequest(
        learner,
        'POST',
        '/push_weights',
        { step_id: stepId, host, port, timeout_s: seconds, backend },
        (seconds + 60) * 1000,
      ),
  };
}

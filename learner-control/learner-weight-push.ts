import { lastLaunchedLearner } from './campaign-learner.ts';
import { learnerRequest } from './learner-client.ts';
import type { CollectivePush } from './policy-weight-sync.ts';

/**
 * The campaign learner's end of a collective weight sync: rank 0 hosts the group's store on `transportHost` (the
 * campaign's `learner.weight_transport_host`; default the learner's control host, 127.0.0.1 for a local learner,
 * which reaches local servers only) and broadcasts the step's weights to every server worker that joins (world =
 * 1 + those workers) that prove the sync's secret. A push that not every worker joins fails after `timeoutS`, and
 * the learner carries on.
 */
export async function learnerWeightPush(
  stateDir: string,
  campaignId: string,
  stepId: number,
  timeoutS = 60,
  transportHost?: string,
): Promise<CollectivePush> {
  const learner = await lastLaunchedLearner(stateDir, campaignId);
  const controlHost = new URL(learner.url).hostname;
  const manifest = await learnerRequest<{ distributed: { device: string } }>(learner, 'GET', '/manifest');
  const backend = manifest.distributed.device === 'cuda' ? 'nccl' : 'gloo';
  return {
    host: transportHost ?? (controlHost === '0.0.0.0' ? '127.0.0.1' : controlHost),
    timeoutS,
    backend,
    push: (host, port, seconds, worldSize, secret) =>
      learnerRequest(
        learner,
        'POST',
        '/push_weights',
        { step_id: stepId, host, port, timeout_s: seconds, backend, world_size: worldSize, secret },
        (seconds + 60) * 1000,
      ),
  };
}

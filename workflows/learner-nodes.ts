import { proxyActivities } from '@temporalio/workflow';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { gpuOptions } from './activity-options.ts';
import { withMissingPollerNamed } from './missing-poller.ts';

/**
 * The nodes after node 0 of a multi-node learner: each one's GPU worker (its own task queue) starts that node's
 * torchrun, or finds it running. Called beside node 0's start and before every training step, so a node whose
 * torchrun died is started again and rejoins the rendezvous when node 0's learner restarts. `nodeQueues` lists
 * the GPU queues in node-rank order (node 0 first); absent or one node: nothing to do.
 */
export async function startLearnerNodes(
  nodeQueues: string[] | undefined,
  input: { campaignId: string; learner: CampaignConfig['learner']; seed: number; samplingTemperature?: number },
): Promise<void> {
  if (!nodeQueues || nodeQueues.length < 2 || input.learner.attach_url !== undefined) return;
  await Promise.all(
    nodeQueues.slice(1).map((queue, i) =>
      withMissingPollerNamed(proxyActivities<GpuActivities>(gpuOptions(queue, '10 minutes')), queue).startLearnerNode({
        ...input,
        nodeRank: i + 1,
      }),
    ),
  );
}

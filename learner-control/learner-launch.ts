import type { CampaignConfig } from '../config/campaign-config.ts';
import { campaignFileName } from '../core/campaign-id.ts';

/**
 * How one node's share of a campaign's learner is launched: `torchrun --standalone` for one node; for several, a
 * c10d rendezvous at node 0's `rdzv_endpoint` under the campaign's id, with the node rank passed to the learner as
 * well (torchrun's c10d rendezvous orders nodes by host name and pid, not by `--node-rank`; the learner renumbers
 * the global ranks node-major so that rank 0 and its control endpoint are on node 0). The dry run prints the same
 * commands (gpu-learner/tbt_gpu/learner/launch.py; test/unit/learner-topology.test.ts keeps the two equal).
 */

export interface LearnerLaunch {
  nodes: number;
  gpusPerNode: number;
  nodeRank: number;
  rdzvEndpoint?: string;
  rdzvId: string;
}

export function learnerLaunch(learner: CampaignConfig['learner'], campaignId: string, nodeRank = 0): LearnerLaunch {
  return {
    nodes: learner.nodes,
    gpusPerNode: learner.gpus_per_node,
    nodeRank,
    rdzvEndpoint: learner.rdzv_endpoint,
    rdzvId: campaignFileName(campaignId),
  };
}

/** torchrun's arguments for this node (the executable not included). */
export function torchrunArgs(launch: LearnerLaunch, configPath: string, resume = true): string[] {
  const learner = ['-m', 'tbt_gpu.learner', '--config', configPath];
  const args =
    launch.nodes === 1
      ? ['--standalone', `--nproc-per-node=${launch.gpusPerNode}`, ...learner]
      : [
          ...['--nnodes', String(launch.nodes), '--nproc-per-node', String(launch.gpusPerNode)],
          ...['--node-rank', String(launch.nodeRank), '--rdzv-backend', 'c10d'],
          ...['--rdzv-endpoint', launch.rdzvEndpoint ?? '', '--rdzv-id', launch.rdzvId],
          ...learner,
          ...['--node-rank', String(launch.nodeRank)],
        ];
  return resume ? [...args, '--resume'] : args;
}

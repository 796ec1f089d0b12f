import fs from 'node:fs';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { BadInputError } from '../core/errors.ts';
import { attachedLearner, recordAttachedLearner, recordedAttachedLearner } from './attached-learner.ts';
import type { LearnerEndpoint } from './learner-client.ts';
import { learnerConfigJson } from './learner-config.ts';
import { learnerLaunch, type LearnerLaunch } from './learner-launch.ts';
import { ensureLearner, ensureLearnerNode, launchFile, learnerFiles } from './learner-process.ts';

/**
 * A campaign's learner as its GPU workers bring it up: node 0's (started here, or attached) and, for a
 * learner over several nodes, each other node's share.
 */

export interface LearnerStartInput {
  campaignId: string;
  learner: CampaignConfig['learner'];
  seed: number;
  samplingTemperature?: number;
}

/**
 * Node 0's learner: started here (one node: standalone; several: this node's share of the c10d rendezvous, the
 * other nodes' GPU workers starting theirs), or, with `attach_url`, one started outside, which must answer with
 * the campaign's world size.
 */
export async function campaignLearner(stateDir: string, input: LearnerStartInput): Promise<LearnerEndpoint> {
  const { learner } = input;
  const files = learnerFiles(stateDir, input.campaignId);
  if (learner.attach_url !== undefined) {
    const endpoint = await attachedLearner(learner);
    recordAttachedLearner(files.dir, endpoint.url, learner.attach_token_file!);
    return endpoint;
  }
  return ensureLearner(
    files,
    learnerConfigJson(learner, input.seed, input.samplingTemperature),
    learnerLaunch(learner, input.campaignId, 0),
  );
}

/** The campaign's learner as last launched here (export follows a step, so it normally answers at once). */
export async function lastLaunchedLearner(stateDir: string, campaignId: string): Promise<LearnerEndpoint> {
  const files = learnerFiles(stateDir, campaignId);
  const attached = recordedAttachedLearner(files.dir);
  if (attached) return attached;
  const config = JSON.parse(fs.readFileSync(files.config, 'utf8')) as Record<string, unknown>;
  const launch = JSON.parse(fs.readFileSync(launchFile(files), 'utf8')) as LearnerLaunch;
  return ensureLearner(files, config, launch);
}

/**
 * Node `nodeRank` (> 0) of a multi-node learner: starts its torchrun (its ranks then wait in the rendezvous) or
 * finds it running. Node 0's learner start or training step sees every rank join.
 */
export async function campaignLearnerNode(
  stateDir: string,
  input: LearnerStartInput & { nodeRank: number },
): Promise<{ nodeRank: number; pid: number; started: boolean }> {
  if (input.nodeRank < 1 || input.nodeRank >= input.learner.nodes)
    throw new BadInputError(`learner node rank ${input.nodeRank}: outside 1..${input.learner.nodes - 1}`);
  const started = await ensureLearnerNode(
    learnerFiles(stateDir, input.campaignId, input.nodeRank),
    learnerConfigJson(input.learner, input.seed, input.samplingTemperature),
    learnerLaunch(input.learner, input.campaignId, input.nodeRank),
  );
  return { nodeRank: input.nodeRank, ...started };
}

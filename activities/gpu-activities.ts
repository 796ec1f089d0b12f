import { Context } from '@temporalio/activity';
import { heartbeating } from './activity-heartbeat.ts';
import { withFailureMapping } from './temporal-failure.ts';
import type { PolicyEngine } from '../infra/embedded-policy-server.ts';
import { campaignLearner, campaignLearnerNode, type LearnerStartInput } from '../learner-control/campaign-learner.ts';
import { releaseCampaignLearner, stopCampaignGpuProcesses } from '../learner-control/campaign-gpu-processes.ts';
import {
  embeddedServerOnWeights,
  externalServersOnWeights,
  syncStepWeights,
  type PolicyWeights,
  type StepWeightSync,
  type SyncedServer,
} from '../learner-control/campaign-policy-weights.ts';
import { learnerRequest } from '../learner-control/learner-client.ts';
import { trainLearnerStep, type TrainStepInput, type TrainStepResult } from '../learner-control/learner-train-step.ts';
import { exportLearnerWeights } from '../learner-control/learner-weight-export.ts';

/**
 * Activities of the GPU worker (one per GPU host, on its own task queue): start the campaign's learner,
 * apply a training step (cancellation reaches the learner), export and sync weights, run the embedded policy
 * server for the local default, and stop both. Every one heartbeats. The work is done in learner-control/.
 */

export type { BatchItem } from '../learner-control/step-batch.ts';
export type { PolicyWeights } from '../learner-control/campaign-policy-weights.ts';
export type { TrainStepInput, TrainStepResult } from '../learner-control/learner-train-step.ts';

export function createGpuActivities(deps: { stateDir: string; controlUrl: string; stallLimitMs?: number }) {
  return withFailureMapping({
    async startLearner(input: LearnerStartInput): Promise<{ controlUrl: string; manifest: Record<string, unknown> }> {
      return heartbeating(async () => {
        const learner = await campaignLearner(deps.stateDir, input);
        // The URL only: the token never enters an activity result (Temporal keeps those in its history).
        return { controlUrl: learner.url, manifest: await learnerRequest(learner, 'GET', '/manifest') };
      });
    },

    /** Node `nodeRank` (> 0) of a multi-node learner, on that node's GPU worker. */
    async startLearnerNode(
      input: LearnerStartInput & { nodeRank: number },
    ): Promise<{ nodeRank: number; pid: number; started: boolean }> {
      return heartbeating(() => campaignLearnerNode(deps.stateDir, input));
    },

    /** Heartbeats every 5 s with the step's progress; a cancellation reaches the learner. */
    async trainStep(input: TrainStepInput & { seed: number }): Promise<TrainStepResult> {
      const ctx = Context.current();
      return trainLearnerStep(deps, input, {
        progress: (details) => ctx.heartbeat(details),
        cancelled: ctx.cancelled,
        log: ctx.log,
      });
    },

    async exportWeights(input: { campaignId: string; stepId: number }): Promise<{ path: string }> {
      return heartbeating(async () => ({
        path: await exportLearnerWeights(deps.stateDir, input.campaignId, input.stepId),
      }));
    },

    /** Stops the campaign's learner only (its policy server keeps serving); whether one was running. */
    async releaseLearner(input: { campaignId: string }): Promise<{ released: boolean }> {
      return heartbeating(() => releaseCampaignLearner(deps.stateDir, input.campaignId));
    },

    async ensurePolicyServer(
      input: PolicyWeights & { engine: PolicyEngine },
    ): Promise<{ baseUrl: string; model: string }> {
      return heartbeating(() => embeddedServerOnWeights(deps.stateDir, input));
    },

    async ensurePolicyWeights(input: PolicyWeights & { servers: string[] }): Promise<void> {
      return heartbeating(() => externalServersOnWeights(deps.stateDir, input, input.servers));
    },

    async syncWeights(input: StepWeightSync): Promise<{ weightVersion: number; servers: SyncedServer[] }> {
      return heartbeating(() =>
        syncStepWeights(deps.stateDir, input, (message, meta) => Context.current().log.warn(message, meta)),
      );
    },

    /**
     * Stops the campaign's learner and its embedded policy server (when the campaign ends). The name predates the
     * policy server and stays: activity names are in recorded histories.
     */
    async stopLearner(input: { campaignId: string }): Promise<void> {
      return heartbeating(() => stopCampaignGpuProcesses(deps.stateDir, input.campaignId));
    },
  });
}

export type GpuActivities = ReturnType<typeof createGpuActivities>;

import { executeChild, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { evaluationWorkflow, type EvaluationResult } from './evaluation-workflow.ts';
import { campaignAttributes } from './search-attribute-keys.ts';
import { withMissingPollerNamed } from './missing-poller.ts';
import { evaluationSummary } from './ui-text.ts';
import { bookkeepingOptions, defaultMaxReruns, gpuOptions } from './activity-options.ts';

/**
 * Evaluates a campaign's latest checkpoint, or the base policy when it has none (`tbt eval run`, and a
 * Temporal Schedule made by `tbt eval schedule`). An
 * embedded policy server of its own (`<campaign>-eval`) loads the newest export, so a running campaign's
 * server is never disturbed.
 */

export interface ScheduledEvaluationInput {
  campaignId: string;
  config: CampaignConfig;
  suiteDir: string;
  queues: { rollout: string; gpu: string };
  repeats: number;
  /** Tasks to evaluate; default: the campaign's selected pool. */
  uids?: string[];
  /** Label prefix of the evaluation (`scheduled` for schedules, `run` for `tbt eval run`). */
  labelPrefix?: string;
}

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 5));

export async function scheduledEvaluationWorkflow(
  input: ScheduledEvaluationInput,
): Promise<EvaluationResult & { step: number }> {
  const gpu = withMissingPollerNamed(
    proxyActivities<GpuActivities>(gpuOptions(input.queues.gpu, '1 hour')),
    input.queues.gpu,
  );
  const latest = await bookkeeping.latestCheckpoint({ campaignId: input.campaignId, needPool: !input.uids });
  let episode = input.config.episode;
  if (episode.policy.base_url === 'embedded') {
    const server = await gpu.ensurePolicyServer({
      campaignId: `${input.campaignId}-eval`,
      engine: episode.policy.engine,
      weightsPath: latest.exportPath ?? undefined,
      weightVersion: latest.step,
      basePath: input.config.learner.model_path,
      deadlineMs: episode.policy.sync_deadline_ms,
    });
    episode = {
      ...episode,
      policy: { ...episode.policy, base_url: server.baseUrl, model: server.model, weight_version: latest.step },
    };
  }
  // The whole run id: its first characters are a timestamp (UUIDv7) shared by runs started close together.
  const label = `${input.labelPrefix ?? 'scheduled'}-step${latest.step}-${workflowInfo().runId}`;
  const uids = input.uids ?? latest.pool;
  const result = await executeChild(evaluationWorkflow, {
    workflowId: `${input.campaignId}/eval-${label}`,
    staticSummary: evaluationSummary(
      `${input.labelPrefix ?? 'scheduled'} evaluation of step ${latest.step}`,
      uids.length,
      input.repeats,
    ),
    typedSearchAttributes: campaignAttributes(input.campaignId, 'evaluate-scheduled', latest.step),
    args: [
      {
        label,
        uids,
        repeats: input.repeats,
        suiteDir: input.suiteDir,
        episode,
        campaignId: input.campaignId,
        rolloutQueue: input.queues.rollout,
        concurrency: input.config.evaluation.concurrency,
        shardSize: input.config.evaluation.shard_size,
        maxReruns: defaultMaxReruns,
      },
    ],
  });
  return { ...result, step: latest.step };
}

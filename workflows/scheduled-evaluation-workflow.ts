import { executeChild, patched, proxyActivities, workflowInfo } from '@temporalio/workflow';
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
 * server is never disturbed. An external server (base_url a URL) is synced to the checkpoint through the campaign's
 * own sync path before it is evaluated; with no checkpoint nothing is loaded, and the result is labelled `external`
 * (whatever the server serves), never with a step it did not load.
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
  // What the result is labelled with: the step whose weights the policy server holds, or `external`.
  let stepLabel = `step${latest.step}`;
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
  } else if (patched('external-eval-weights')) {
    // Evaluations started before this patch labelled an external server with a step it never loaded; replay keeps it.
    if (latest.exportPath) {
      await gpu.ensurePolicyWeights({
        campaignId: input.campaignId,
        weightVersion: latest.step,
        weightsPath: latest.exportPath,
        basePath: input.config.learner.model_path,
        deadlineMs: episode.policy.sync_deadline_ms,
        servers: episode.policy.sync_instances ?? [episode.policy.base_url],
      });
      episode = { ...episode, policy: { ...episode.policy, weight_version: latest.step } };
    } else stepLabel = 'external';
  }
  // The whole run id: its first characters are a timestamp (UUIDv7) shared by runs started close together.
  const label = `${input.labelPrefix ?? 'scheduled'}-${stepLabel}-${workflowInfo().runId}`;
  const uids = input.uids ?? latest.pool;
  const evaluated = stepLabel === 'external' ? 'the external policy as served' : `step ${latest.step}`;
  const result = await executeChild(evaluationWorkflow, {
    workflowId: `${input.campaignId}/eval-${label}`,
    staticSummary: evaluationSummary(
      `${input.labelPrefix ?? 'scheduled'} evaluation of ${evaluated}`,
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

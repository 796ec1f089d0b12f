import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  executeChild,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
// From common: the workflow package re-exports it in a way Node's ESM loader cannot see when a test imports this file.
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { logprobsServing, loraServing } from '../config/lora-serving.ts';
import { withJudgeMode } from '../config/stage-judge-mode.ts';
import { canonicalJson } from '../core/canonical-json.ts';
import { pausingEvaluation } from './evaluation-pauses.ts';
import { evaluationWorkflow, type EvaluationInput, type EvaluationResult } from './evaluation-workflow.ts';
import { campaignAttributes } from './search-attribute-keys.ts';
import { withMissingPollerNamed } from './missing-poller.ts';
import { evaluationSummary } from './ui-text.ts';
import { bookkeepingOptions, defaultMaxReruns, gpuOptions, infraBackoffMs, outageWaits } from './activity-options.ts';

/**
 * Evaluates a campaign's latest checkpoint, or the base policy when it has none (`tbt eval run`, and a
 * Temporal Schedule made by `tbt eval schedule`). The label is stable per (campaign, step, what is evaluated):
 * `<prefix>-step<N>-<digest>`, the digest naming the tasks, repeats and episode config. So a run that timed out,
 * failed or is run again evaluates under the same child workflow id and episode ids, and every episode that
 * already finished is returned from the store instead of being played again (only the rest runs).
 *
 * An embedded policy server of the evaluation's own (named after the evaluation's workflow id) loads the newest
 * export, so a running campaign's server is never disturbed, and is stopped when the evaluation ends. An external
 * server (base_url a URL) is synced to the checkpoint through the campaign's own sync path before it is evaluated;
 * with no checkpoint nothing is loaded, and the result is labelled `external` (whatever the server serves), never
 * with a step it did not load.
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

type ScheduledEvaluationResult = EvaluationResult & { step: number };
type Checkpoint = Awaited<ReturnType<CampaignActivities['latestCheckpoint']>>;

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 5));

/** Runs started before this patch put the run id into the label and shared one `<campaign>-eval` server. */
const labelledByStepPatch = 'scheduled-eval-by-step';

/** Between tries to start an evaluation whose workflow is still running: 10 s doubling to at most 10 minutes. */
const waitForRunning = { initialMs: 10_000, maxMs: 10 * 60_000 };

/**
 * An evaluation outside a campaign has no campaign to pause: before its coverage gate fails it, it waits out an
 * outage and runs the keys still failing again, 4 times, spaced as a paused campaign stage's retries (`recovery`:
 * 5 minutes doubling, 75 minutes in all by default). Configs recorded before `recovery` existed get its defaults.
 */
export function evaluationOutageWaits(config: CampaignConfig): NonNullable<EvaluationInput['outageWaits']> {
  return outageWaits((config as Partial<CampaignConfig>).recovery, 4);
}

export async function scheduledEvaluationWorkflow(input: ScheduledEvaluationInput): Promise<ScheduledEvaluationResult> {
  const byStep = patched(labelledByStepPatch);
  const gpu = withMissingPollerNamed(
    proxyActivities<GpuActivities>(gpuOptions(input.queues.gpu, '1 hour')),
    input.queues.gpu,
  );
  const latest = await bookkeeping.latestCheckpoint({ campaignId: input.campaignId, needPool: !input.uids });
  return byStep ? evaluateStep(input, gpu, latest) : evaluateLabelledByRun(input, gpu, latest);
}

/**
 * FNV-1a (32 bits) as 8 hex digits: a short, deterministic name for what an evaluation evaluates (workflow code
 * has no crypto module, and a collision needs two configs evaluated at one step of one campaign).
 */
function digest(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return (hash >>> 0).toString(16).padStart(8, '0');
}

/**
 * The label: one per (campaign, step, what is evaluated). Other tasks, repeats or an other episode config (policy,
 * sampling, judge, judge mode, limits) are another evaluation: reusing this one's episodes would score them with the
 * wrong ones, or fail the coverage gate on keys that are not in the task list. The legacy judge mode, which every
 * evaluation had before the mode was configurable, leaves the label as it was, so those evaluations still resume.
 */
function stableLabel(input: ScheduledEvaluationInput, stepLabel: string, uids: string[]): string {
  const mode = input.config.evaluation.judge_mode;
  const work = {
    uids,
    repeats: input.repeats,
    episode: input.config.episode,
    base: input.config.learner.model_path,
    ...(mode !== undefined && mode !== 'legacy' ? { judgeMode: mode } : {}),
  };
  return `${input.labelPrefix ?? 'scheduled'}-${stepLabel}-${digest(canonicalJson(work))}`;
}

async function evaluateStep(
  input: ScheduledEvaluationInput,
  gpu: GpuActivities,
  latest: Checkpoint,
): Promise<ScheduledEvaluationResult> {
  const policy = input.config.episode.policy;
  const embedded = policy.base_url === 'embedded';
  const uids = input.uids ?? latest.pool;
  // What the result is labelled with: the step whose weights the policy server holds, or `external`.
  const stepLabel = embedded || latest.exportPath ? `step${latest.step}` : 'external';
  const label = stableLabel(input, stepLabel, uids);
  const evaluationId = `${input.campaignId}/eval-${label}`;
  // The embedded server is this evaluation's alone: stopping it never touches the campaign's learner or server,
  // nor another evaluation of the campaign. A run cut off by its run timeout (or terminated) leaves it running:
  // the next run of the same step, the one that resumes, takes it over and stops it; else `tbt workers down` does.
  const serverId = evaluationId;
  const policyOnWeights = async (): Promise<CampaignConfig['episode']> => {
    const episode = input.config.episode;
    if (embedded) {
      const server = await gpu.ensurePolicyServer({
        campaignId: serverId,
        engine: policy.engine,
        weightsPath: latest.exportPath ?? undefined,
        weightVersion: latest.step,
        basePath: input.config.learner.model_path,
        deadlineMs: policy.sync_deadline_ms,
        ...loraServing(input.config.learner),
        ...logprobsServing(input.config.learner),
      });
      return {
        ...episode,
        policy: { ...policy, base_url: server.baseUrl, model: server.model, weight_version: latest.step },
      };
    }
    const servers = policy.sync_instances ?? [policy.base_url];
    // Runs started before this guard evaluated shared servers while training moved their weights; replay keeps it.
    if (patched('refuse-shared-training-server')) {
      const shared = await bookkeeping.campaignTrainingOn({ campaignId: input.campaignId, servers });
      if (shared.length)
        throw ApplicationFailure.create({
          type: 'BadInputError',
          nonRetryable: true,
          message:
            `campaign ${input.campaignId} is training on ${shared.join(', ')}: each step syncs new weights into it, ` +
            `so this evaluation would sample from weights that change under it while labelled step ${latest.step}. ` +
            'Evaluate with episode.policy.base_url: embedded (a server of its own), or after training',
        });
    }
    if (!latest.exportPath) return episode;
    await gpu.ensurePolicyWeights({
      campaignId: input.campaignId,
      weightVersion: latest.step,
      weightsPath: latest.exportPath,
      basePath: input.config.learner.model_path,
      deadlineMs: policy.sync_deadline_ms,
      servers,
      // Runs started before this guard loaded whatever step they evaluated; replay keeps their activity input.
      ...(patched('refuse-older-export') ? { refuseOlder: true } : {}),
    });
    return { ...episode, policy: { ...policy, weight_version: latest.step } };
  };
  const evaluated = stepLabel === 'external' ? 'the external policy as served' : `step ${latest.step}`;
  const run = async (): Promise<ScheduledEvaluationResult> => {
    for (let waits = 0; ; waits++) {
      // Again after each wait: the run waited for may have stopped the server they shared when it ended.
      const episode = withJudgeMode(await policyOnWeights(), input.config.evaluation.judge_mode);
      if (waits > 0) setCurrentDetails(`starting ${evaluationId} again after waiting for it`);
      // `tbt eval run` follows the child this names (cli/evaluation-progress.ts); metadata only, no command.
      setCurrentDetails(`running ${evaluationId}`);
      try {
        const result = await executeChild(evaluationWorkflow, {
          workflowId: evaluationId,
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
              outageWaits: evaluationOutageWaits(input.config),
              taskErrors: input.config.evaluation.task_errors,
            },
          ],
        });
        return { ...result, step: latest.step };
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
      // The same evaluation is still running (another `tbt eval run` of it, or a run whose parent just ended and
      // whose child the server has not yet closed). A workflow cannot wait on a workflow that is not its child, and
      // a second copy would play the same keys twice; so this run waits and starts it again once that one has
      // closed: the keys it finished are then returned from the store, and this run gets the same result.
      const ms = infraBackoffMs(waits + 1, waitForRunning);
      log.info('evaluation already running; waiting for it before starting it again', { evaluationId, ms });
      setCurrentDetails(`waiting for ${evaluationId}, already running (another run of the same evaluation)`);
      await sleep(ms);
    }
  };
  try {
    // Runs started before this patch failed on an infrastructure failure: replay fails them the same way.
    if (!patched('evaluation-pauses')) return await run();
    return await pausingEvaluation(`evaluation ${evaluationId}`, input.config.recovery, run);
  } finally {
    if (embedded) await stopEvaluationServer(input.queues.gpu, serverId);
  }
}

/**
 * Stops the evaluation's embedded server, also when the run was cancelled. A stop that fails (no GPU worker) is
 * logged, not thrown: the evaluation's own result or error is what the run reports.
 */
async function stopEvaluationServer(gpuQueue: string, serverId: string): Promise<void> {
  // Best effort: a GPU worker gone for 10 minutes is not waited for (`tbt workers down` stops what is left).
  const { stopLearner } = proxyActivities<GpuActivities>({
    ...gpuOptions(gpuQueue, '5 minutes'),
    scheduleToStartTimeout: '10 minutes',
  });
  await CancellationScope.nonCancellable(async () => {
    try {
      // Named for the campaign's learner; on an evaluation's id it finds no learner, only this server.
      await stopLearner({ campaignId: serverId });
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      log.warn('the evaluation policy server was not stopped', { serverId, error: err.cause?.message ?? err.message });
    }
  });
}

/** Runs started before `scheduled-eval-by-step`: the run id in the label, one shared `<campaign>-eval` server. */
async function evaluateLabelledByRun(
  input: ScheduledEvaluationInput,
  gpu: GpuActivities,
  latest: Checkpoint,
): Promise<ScheduledEvaluationResult> {
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
      ...loraServing(input.config.learner),
      ...logprobsServing(input.config.learner),
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

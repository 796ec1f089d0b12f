import {
  ApplicationFailure,
  condition,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  sleep,
} from '@temporalio/workflow';
import type { CampaignActivities, StepRecord } from '../activities/campaign-activities.ts';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { groupAdvantages } from '../core/grpo.ts';
import { familyStepTaskOrder, stepTaskOrder } from '../core/seeded-choice.ts';
import {
  bookkeepingOptions,
  gpuOptions,
  infraBackoffMs,
  lostStepRetries,
  type InfraBackoff,
} from './activity-options.ts';
import { ConcurrencySlots } from './concurrency-slots.ts';
import { selectGroups, type DrawnGroup, type GroupSelection } from './group-selection.ts';
import { startLearnerNodes } from './learner-nodes.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';
import { withMissingPollerNamed } from './missing-poller.ts';

/**
 * One GRPO training step (child workflow `<campaign>/step-<n>`): seeded task choice, groups of G episodes,
 * refill of episodes lost to infrastructure errors (at most `infra_refill_cap` extra per group, then the
 * group is dropped and replaced), DAPO-style eviction of zero-variance groups (at most `max_replacements`
 * fresh tasks, then the configured fallback; the rule itself is group-selection.ts), advantages, the learner
 * update, weight sync, the record.
 * Episode ids are deterministic, so a replay or a restart runs and counts every episode exactly once.
 * At most `training.concurrency` episodes are in flight across all groups (concurrency-slots.ts). Each refill
 * waits an exponential backoff first (activity-options.ts). A step left with no group to train (every group
 * lost to infrastructure errors) waits and starts over with fresh episode ids up to `lostStepRetries` times,
 * then fails with `StepLostToInfrastructure`, which pauses the campaign with that reason instead of ending it.
 */

/** Failure type of a step that lost every group even after its retries (campaign-workflow.ts pauses on it). */
export const stepLostFailureType = 'StepLostToInfrastructure';

export interface TrainingStepInput {
  campaignId: string;
  step: number;
  pool: string[];
  suiteDir: string;
  episode: EpisodeConfig;
  training: CampaignConfig['training'];
  learner: CampaignConfig['learner'];
  seed: number;
  rolloutQueue: string;
  gpuQueue: string;
  /** Every learner node's GPU queue in node-rank order, for a learner over several nodes. */
  gpuNodeQueues?: string[];
  /** Every policy server the campaign samples from: each loads this step's export afterwards. */
  policyServers: string[];
  /** Set when the servers are the embedded one (a failed sync restarts it with this engine). */
  embeddedEngine?: 'vllm' | 'builtin';
  /** Weight version the servers hold while this step samples (the previous step's; 0 = base weights). */
  weightVersion: number;
  /** @deprecated input of steps started before weight sync covered every server: the embedded server only. */
  policyBaseUrl?: string;
  /** The GPU activities' schedule-to-start limit (`recovery.gpu_queue_wait_ms`; default: activity-options.ts). */
  gpuQueueWaitMs?: number;
  /** Backoff before refills and step retries (default: activity-options.ts). */
  infraBackoff?: InfraBackoff;
}

interface GroupResult extends DrawnGroup {
  episodes: EpisodeSummary[];
}

export async function trainingStepWorkflow(input: TrainingStepInput): Promise<StepRecord> {
  const t = input.training;
  const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 10));
  // Steps started before the slots, refill backoff and step retries replay their recorded commands.
  const current = patched('step-slots-backoff');
  setCurrentDetails(`sampling groups of ${t.group_size} for step ${input.step}`);
  const selection = await drawTrainedGroups(input, current);
  if (selection.informative.length < t.groups_per_step)
    log.warn('fewer informative groups than configured', {
      step: input.step,
      informative: selection.informative.length,
      wanted: t.groups_per_step,
      fallback: selection.fallback,
    });
  setCurrentDetails(
    `learner update on ${selection.trained.length} groups (${selection.informative.length} informative), ` +
      `then export and weight sync`,
  );
  const policy = await updatePolicy(input, advantageItems(selection.trained, t.normalize_std));
  const record = stepRecord(input, selection, policy);
  await bookkeeping.recordStep(record);
  return record;
}

/** Steps started by older code carry policyBaseUrl and no version: they keep working after a deploy. */
function sampledWeightVersion(input: TrainingStepInput): number {
  return input.weightVersion ?? input.step - 1;
}

/**
 * Runs one group: G episodes, then one refill per lost one up to the cap. `attempt.retry` is the step retry
 * whose fresh episode ids the episodes take.
 */
function groupRunner(input: TrainingStepInput, current: boolean, attempt: { retry: number }) {
  // A pool listing a uid twice could draw it twice in one step: then activities keep sequence-number ids.
  const uniqueIds = new Set(input.pool).size === input.pool.length;
  const t = input.training;
  const sampledVersion = sampledWeightVersion(input);
  // Episodes in flight across all groups of this step, bounded by training.concurrency.
  const slots = new ConcurrencySlots(t.concurrency);
  let inFlight = 0;
  let done = 0;
  const showSampling = () =>
    setCurrentDetails(
      `sampling step ${input.step}: ${done} episodes done, ${inFlight} in flight` +
        (attempt.retry ? ` (step retry ${attempt.retry})` : ''),
    );
  const episode = async (uid: string, rep: number): Promise<EpisodeSummary> => {
    if (current) await slots.acquire();
    else await condition(() => inFlight < t.concurrency);
    inFlight += 1;
    showSampling();
    try {
      const retry = attempt.retry ? `~retry-${attempt.retry}` : '';
      const activityInput: EpisodeActivityInput = {
        episodeId: `${input.campaignId}/step-${input.step}/${uid}#${rep}${retry}`,
        suiteDir: input.suiteDir,
        taskUid: uid,
        purpose: 'train',
        campaign: input.campaignId,
        step: input.step,
        repetition: rep,
        config: input.episode,
      };
      return await runEpisodeOrInfraError(input.rolloutQueue, activityInput, uniqueIds);
    } finally {
      inFlight -= 1;
      done += 1;
      showSampling();
      if (current) slots.release();
    }
  };

  // An episode sampled from weights more than max_staleness versions old (one recorded before a restart, say)
  // is dropped and refilled like a lost one; an episode without a version predates versioning: current.
  const isStale = (e: EpisodeSummary) => sampledVersion - (e.weightVersion ?? sampledVersion) > t.max_staleness;
  return async (uid: string): Promise<GroupResult> => {
    const first = await Promise.all(Array.from({ length: t.group_size }, (_, rep) => episode(uid, rep)));
    const valid = first.filter((e) => e.outcome !== 'infrastructure_error' && !isStale(e));
    let infraErrors = first.filter((e) => e.outcome === 'infrastructure_error').length;
    let stale = first.length - valid.length - infraErrors;
    let nextRep = t.group_size;
    // Refill one episode per lost one, never more than the cap: infrastructure errors are never graded.
    while (valid.length < t.group_size && nextRep < t.group_size + t.infra_refill_cap) {
      if (current) await sleep(infraBackoffMs(nextRep - t.group_size + 1, input.infraBackoff));
      const refill = await episode(uid, nextRep++);
      if (refill.outcome === 'infrastructure_error') infraErrors += 1;
      else if (isStale(refill)) stale += 1;
      else valid.push(refill);
    }
    const rewards = valid.map((e) => e.reward);
    return { uid, episodes: valid, rewards, lost: valid.length < t.group_size, infraErrors, stale };
  };
}

/** Rounds of groups until the selection (group-selection.ts) is final. */
async function drawGroups(
  order: string[],
  training: TrainingStepInput['training'],
  runGroup: (uid: string) => Promise<GroupResult>,
  earlierAttempts: GroupResult[],
): Promise<GroupSelection<GroupResult>> {
  const rounds: GroupResult[][] = [];
  for (;;) {
    const selection = selectGroups({ order, rounds, earlierAttempts }, training);
    if (selection.next.length === 0) return selection;
    rounds.push(await Promise.all(selection.next.map(runGroup)));
  }
}

/** The step's groups, drawn again with fresh episode ids while every group is lost (at most lostStepRetries). */
async function drawTrainedGroups(input: TrainingStepInput, current: boolean): Promise<GroupSelection<GroupResult>> {
  const t = input.training;
  const attempt = { retry: 0 };
  const runGroup = groupRunner(input, current, attempt);
  // Steps recorded before task_order existed carry no field: the seeded order, as they ran.
  const order =
    t.task_order === 'by_family'
      ? familyStepTaskOrder(input.pool, input.seed, input.step, t.groups_per_step)
      : stepTaskOrder(input.pool, input.seed, input.step);
  const earlierAttempts: GroupResult[] = [];
  for (;;) {
    const selection = await drawGroups(order, t, runGroup, earlierAttempts);
    // Every group lost to infrastructure errors: nothing to train on. Wait, then start over with fresh ids.
    if (!current || selection.informative.length > 0 || selection.zeroVariance.length > 0) return selection;
    if (attempt.retry >= lostStepRetries)
      throw ApplicationFailure.nonRetryable(
        `step ${input.step}: every group was lost to infrastructure errors (${selection.lostGroups} groups, ` +
          `${selection.infraErrors} infrastructure errors, ${attempt.retry} retries); the campaign pauses until ` +
          `resumed`,
        stepLostFailureType,
      );
    attempt.retry += 1;
    log.warn('every group of the step was lost; retrying after backoff', {
      step: input.step,
      stepRetry: attempt.retry,
    });
    await sleep(infraBackoffMs(attempt.retry, input.infraBackoff));
    earlierAttempts.push(...selection.lost);
  }
}

/** Each trained episode with its group-relative advantage. */
function advantageItems(trained: GroupResult[], normalizeStd: boolean): { episodeId: string; advantage: number }[] {
  return trained.flatMap((g) => {
    const advantages = groupAdvantages(
      g.episodes.map((e) => e.reward),
      normalizeStd,
    );
    return g.episodes.map((e, i) => ({ episodeId: e.id, advantage: advantages[i]! }));
  });
}

/** The learner update, the export of its weights, and their sync to every policy server. */
async function updatePolicy(input: TrainingStepInput, items: { episodeId: string; advantage: number }[]) {
  const gpu = withMissingPollerNamed(
    proxyActivities<GpuActivities>(gpuOptions(input.gpuQueue, '4 hours', input.gpuQueueWaitMs)),
    input.gpuQueue,
  );
  // Steps started by older code carry policyBaseUrl: they keep working after a deploy.
  const policyServers = input.policyServers ?? (input.policyBaseUrl ? [input.policyBaseUrl] : []);
  const stepId = input.step;
  // The other nodes of a multi-node learner run (or are started again) before node 0 takes the step.
  await startLearnerNodes(input.gpuNodeQueues, {
    campaignId: input.campaignId,
    learner: input.learner,
    seed: input.seed,
    samplingTemperature: input.episode.sampling.temperature,
  });
  const update = await gpu.trainStep({
    campaignId: input.campaignId,
    stepId,
    items,
    learner: input.learner,
    seed: input.seed,
    samplingTemperature: input.episode.sampling.temperature,
  });
  const exported = await gpu.exportWeights({ campaignId: input.campaignId, stepId });
  // On-policy: the next step samples only after every server holds this step's weights (version = step).
  const synced = await gpu.syncWeights({
    campaignId: input.campaignId,
    servers: policyServers,
    engine: input.embeddedEngine,
    weightsPath: exported.path,
    weightVersion: stepId,
    basePath: input.learner.model_path,
    deadlineMs: input.episode.policy.sync_deadline_ms,
  });
  return { update, exported, synced };
}

function stepRecord(
  input: TrainingStepInput,
  selection: GroupSelection<GroupResult>,
  { update, exported, synced }: Awaited<ReturnType<typeof updatePolicy>>,
): StepRecord {
  const { trained } = selection;
  // Leakage check: an infrastructure-errored episode must never reach an advantage.
  const leaked = trained.flatMap((g) => g.episodes).filter((e) => e.outcome === 'infrastructure_error').length;
  const rewards = trained.flatMap((g) => g.episodes.map((e) => e.reward as number));
  return {
    campaignId: input.campaignId,
    step: input.step,
    groups: trained.map((g) => ({
      uid: g.uid,
      rewards: g.episodes.map((e) => e.reward),
      episodeIds: g.episodes.map((e) => e.id),
    })),
    informativeGroups: selection.informative.length,
    zeroVarianceGroups: selection.zeroVariance.length,
    replacements: selection.replacements,
    lostGroups: selection.lostGroups,
    infraErrors: selection.infraErrors,
    leakedInfraEpisodes: leaked,
    fallback: selection.fallback,
    meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
    update: update.metrics,
    repeatedUpdate: update.repeated,
    checkpoint: update.checkpoint,
    exportPath: exported.path,
    weightVersion: synced.weightVersion,
    sampledWeightVersion: sampledWeightVersion(input),
    staleEpisodes: selection.staleEpisodes,
    syncSeconds: (synced.servers ?? []).map((s) => s.seconds), // absent in results of older activity code
  };
}

import { ApplicationFailure, condition, log, patched, proxyActivities, sleep } from '@temporalio/workflow';
import type { CampaignActivities, StepRecord } from '../activities/campaign-activities.ts';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { groupAdvantages, isZeroVariance } from '../core/grpo.ts';
import { familyStepTaskOrder, stepTaskOrder } from '../core/seeded-choice.ts';
import { runEpisodeOrInfraError } from './episode-batch-workflow.ts';
import {
  bookkeepingOptions,
  gpuOptions,
  infraBackoffMs,
  lostStepRetries,
  type InfraBackoff,
} from './activity-options.ts';
import { ConcurrencySlots } from './concurrency-slots.ts';
import { startLearnerNodes } from './learner-nodes.ts';

/**
 * One GRPO training step (child workflow `<campaign>/step-<n>`): seeded task choice, groups of G episodes,
 * refill of episodes lost to infrastructure errors (at most `infra_refill_cap` extra per group, then the
 * group is dropped and replaced), DAPO-style eviction of zero-variance groups (at most `max_replacements`
 * fresh tasks, then the configured fallback), advantages, the learner update, weight sync, the record.
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
  /** Backoff before refills and step retries (default: activity-options.ts). */
  infraBackoff?: InfraBackoff;
}

interface GroupResult {
  uid: string;
  episodes: EpisodeSummary[];
  lost: boolean;
  infraErrors: number;
  stale: number;
}

export async function trainingStepWorkflow(input: TrainingStepInput): Promise<StepRecord> {
  const t = input.training;
  // Steps started by older code carry policyBaseUrl and no version: they keep working after a deploy.
  const policyServers = input.policyServers ?? (input.policyBaseUrl ? [input.policyBaseUrl] : []);
  const sampledVersion = input.weightVersion ?? input.step - 1;
  const gpu = proxyActivities<GpuActivities>(gpuOptions(input.gpuQueue, '4 hours'));
  const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 10));

  // Steps started before the slots, refill backoff and step retries replay their recorded commands.
  const current = patched('step-slots-backoff');
  // Episodes in flight across all groups of this step, bounded by training.concurrency.
  const slots = new ConcurrencySlots(t.concurrency);
  let inFlight = 0;
  let stepRetry = 0;
  const episode = async (uid: string, rep: number): Promise<EpisodeSummary> => {
    if (current) await slots.acquire();
    else await condition(() => inFlight < t.concurrency);
    inFlight += 1;
    try {
      const activityInput: EpisodeActivityInput = {
        episodeId: `${input.campaignId}/step-${input.step}/${uid}#${rep}${stepRetry ? `~retry-${stepRetry}` : ''}`,
        suiteDir: input.suiteDir,
        taskUid: uid,
        purpose: 'train',
        campaign: input.campaignId,
        step: input.step,
        repetition: rep,
        config: input.episode,
      };
      return await runEpisodeOrInfraError(input.rolloutQueue, activityInput);
    } finally {
      inFlight -= 1;
      if (current) slots.release();
    }
  };

  // An episode sampled from weights more than max_staleness versions old (one recorded before a restart, say)
  // is dropped and refilled like a lost one; an episode without a version predates versioning: current.
  const isStale = (e: EpisodeSummary) => sampledVersion - (e.weightVersion ?? sampledVersion) > t.max_staleness;
  const runGroup = async (uid: string): Promise<GroupResult> => {
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
    return { uid, episodes: valid, lost: valid.length < t.group_size, infraErrors, stale };
  };

  // Steps recorded before task_order existed carry no field: the seeded order, as they ran.
  const order =
    t.task_order === 'by_family'
      ? familyStepTaskOrder(input.pool, input.seed, input.step, t.groups_per_step)
      : stepTaskOrder(input.pool, input.seed, input.step);
  let cursor = 0;
  let replacements = 0;
  const informative: GroupResult[] = [];
  const zeroVariance: GroupResult[] = [];
  let lostGroups = 0;
  let infraErrors = 0;
  let staleEpisodes = 0;
  let round = 0;
  for (;;) {
    while (informative.length < t.groups_per_step) {
      const wanted = t.groups_per_step - informative.length;
      const allowed = round === 0 ? wanted : Math.min(wanted, t.max_replacements - replacements);
      const uids = order.slice(cursor, cursor + allowed);
      if (uids.length === 0) break;
      cursor += uids.length;
      if (round > 0) replacements += uids.length;
      round += 1;
      for (const g of await Promise.all(uids.map(runGroup))) {
        infraErrors += g.infraErrors;
        staleEpisodes += g.stale;
        if (g.lost) lostGroups += 1;
        else if (isZeroVariance(g.episodes.map((e) => e.reward))) zeroVariance.push(g);
        else informative.push(g);
      }
    }
    // Every group lost to infrastructure errors: nothing to train on. Wait, then start over with fresh ids.
    if (!current || informative.length > 0 || zeroVariance.length > 0) break;
    if (stepRetry >= lostStepRetries)
      throw ApplicationFailure.nonRetryable(
        `step ${input.step}: every group was lost to infrastructure errors (${lostGroups} groups, ${infraErrors} ` +
          `infrastructure errors, ${stepRetry} retries); the campaign pauses until resumed`,
        stepLostFailureType,
      );
    stepRetry += 1;
    log.warn('every group of the step was lost; retrying after backoff', { step: input.step, stepRetry });
    await sleep(infraBackoffMs(stepRetry, input.infraBackoff));
    cursor = 0;
    round = 0;
    replacements = 0;
  }
  let fallback: StepRecord['fallback'] = null;
  const trained = [...informative];
  if (trained.length < t.groups_per_step) {
    fallback = t.zero_variance_fallback;
    if (fallback === 'keep_zero_variance' || trained.length === 0)
      trained.push(...zeroVariance.slice(0, t.groups_per_step - trained.length));
    log.warn('fewer informative groups than configured', {
      step: input.step,
      informative: informative.length,
      wanted: t.groups_per_step,
      fallback,
    });
  }
  const items = trained.flatMap((g) => {
    const advantages = groupAdvantages(
      g.episodes.map((e) => e.reward),
      t.normalize_std,
    );
    return g.episodes.map((e, i) => ({ episodeId: e.id, advantage: advantages[i]! }));
  });
  // Leakage check: an infrastructure-errored episode must never reach an advantage.
  const leaked = trained.flatMap((g) => g.episodes).filter((e) => e.outcome === 'infrastructure_error').length;

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
  const rewards = trained.flatMap((g) => g.episodes.map((e) => e.reward as number));
  const record: StepRecord = {
    campaignId: input.campaignId,
    step: stepId,
    groups: trained.map((g) => ({
      uid: g.uid,
      rewards: g.episodes.map((e) => e.reward),
      episodeIds: g.episodes.map((e) => e.id),
    })),
    informativeGroups: informative.length,
    zeroVarianceGroups: zeroVariance.length,
    replacements,
    lostGroups,
    infraErrors,
    leakedInfraEpisodes: leaked,
    fallback,
    meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
    update: update.metrics,
    repeatedUpdate: update.repeated,
    checkpoint: update.checkpoint,
    exportPath: exported.path,
    weightVersion: synced.weightVersion,
    sampledWeightVersion: sampledVersion,
    staleEpisodes,
    syncSeconds: (synced.servers ?? []).map((s) => s.seconds), // absent in results of older activity code
  };
  await bookkeeping.recordStep(record);
  return record;
}

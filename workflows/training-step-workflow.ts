import { condition, log, proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities, StepRecord } from '../activities/campaign-activities.ts';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../activities/episode-store.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { groupAdvantages, isZeroVariance } from '../core/grpo.ts';
import { stepTaskOrder } from '../core/seeded-choice.ts';
import { runEpisodeOrInfraError } from './episode-batch-workflow.ts';
import { bookkeepingOptions } from './activity-options.ts';

/**
 * One GRPO training step (child workflow `<campaign>/step-<n>`): seeded task choice, groups of G episodes,
 * refill of episodes lost to infrastructure errors (at most `infra_refill_cap` extra per group, then the
 * group is dropped and replaced), DAPO-style eviction of zero-variance groups (at most `max_replacements`
 * fresh tasks, then the configured fallback), advantages, the learner update, weight sync, the record.
 * Episode ids are deterministic, so a replay or a restart runs and counts every episode exactly once.
 */

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
  /** Embedded policy server to sync the exported weights into (absent for an external server). */
  policyBaseUrl?: string;
}

interface GroupResult {
  uid: string;
  episodes: EpisodeSummary[];
  lost: boolean;
  infraErrors: number;
}

export async function trainingStepWorkflow(input: TrainingStepInput): Promise<StepRecord> {
  const t = input.training;
  const gpu = proxyActivities<GpuActivities>({
    taskQueue: input.gpuQueue,
    startToCloseTimeout: '4 hours',
    heartbeatTimeout: '2 minutes',
    retry: {
      maximumAttempts: 10,
      initialInterval: '5 seconds',
      maximumInterval: '2 minutes',
      nonRetryableErrorTypes: ['BadInput'],
    },
  });
  const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 10));

  // Episodes in flight across all groups of this step, bounded by training.concurrency.
  let inFlight = 0;
  const episode = async (uid: string, rep: number): Promise<EpisodeSummary> => {
    await condition(() => inFlight < t.concurrency);
    inFlight += 1;
    try {
      const activityInput: EpisodeActivityInput = {
        episodeId: `${input.campaignId}/step-${input.step}/${uid}#${rep}`,
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
    }
  };

  const runGroup = async (uid: string): Promise<GroupResult> => {
    const first = await Promise.all(Array.from({ length: t.group_size }, (_, rep) => episode(uid, rep)));
    const valid = first.filter((e) => e.outcome !== 'infrastructure_error');
    let infraErrors = first.length - valid.length;
    let nextRep = t.group_size;
    // Refill one episode per lost one, never more than the cap: infrastructure errors are never graded.
    while (valid.length < t.group_size && nextRep < t.group_size + t.infra_refill_cap) {
      const refill = await episode(uid, nextRep++);
      if (refill.outcome === 'infrastructure_error') infraErrors += 1;
      else valid.push(refill);
    }
    return { uid, episodes: valid, lost: valid.length < t.group_size, infraErrors };
  };

  const order = stepTaskOrder(input.pool, input.seed, input.step);
  let cursor = 0;
  let replacements = 0;
  const informative: GroupResult[] = [];
  const zeroVariance: GroupResult[] = [];
  let lostGroups = 0;
  let infraErrors = 0;
  let round = 0;
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
      if (g.lost) lostGroups += 1;
      else if (isZeroVariance(g.episodes.map((e) => e.reward))) zeroVariance.push(g);
      else informative.push(g);
    }
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
  const update = await gpu.trainStep({
    campaignId: input.campaignId,
    stepId,
    items,
    learner: input.learner,
    seed: input.seed,
  });
  const exported = await gpu.exportWeights({ campaignId: input.campaignId, stepId });
  const synced = input.policyBaseUrl
    ? await gpu.syncWeights({ baseUrl: input.policyBaseUrl, path: exported.path, campaignId: input.campaignId })
    : undefined;
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
    weightVersion: synced?.weightVersion ?? null,
  };
  await bookkeeping.recordStep(record);
  return record;
}

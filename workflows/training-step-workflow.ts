import {
  type ActivityInterfaceFor,
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
import { logprobsServing, loraServing } from '../config/lora-serving.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { groupAdvantages } from '../core/grpo.ts';
import { familyStepTaskOrder, stepTaskOrder } from '../core/seeded-choice.ts';
import { epochTaskWindow, firstTaskCursor, type TaskCursor } from '../core/epoch-task-order.ts';
import {
  bookkeepingOptions,
  gpuOptions,
  infraBackoffMs,
  lostStepRetries,
  type InfraBackoff,
} from './activity-options.ts';
import { ConcurrencySlots } from './concurrency-slots.ts';
import { episodeLag, oldestVersion, sampledStep, type SampledStep } from './sampled-step.ts';
import { selectGroups, type DrawnGroup, type GroupSelection } from './group-selection.ts';
import { startLearnerNodes } from './learner-nodes.ts';
import { batchFields, episodesToRead, trainedBatchRecord, versionMixField } from './trained-batch-record.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';
import { withMissingPollerNamed } from './missing-poller.ts';
import { SERVED_WEIGHTS_MISMATCH } from '../core/served-weights-cause.ts';

/**
 * One GRPO training step (child workflow `<campaign>/step-<n>`): its tasks (the next ones of the campaign's
 * epoch-shuffled stream from `taskCursor`, core/epoch-task-order.ts, or a per-step seeded order), groups of G episodes,
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
  /** The episodes' config, the training judge mode included (the step reads it from here, not from `training`). */
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
  /** The export of `weightVersion` (absent: the base weights, or a step started before it was passed). */
  weightsPath?: string;
  /** @deprecated input of steps started before weight sync covered every server: the embedded server only. */
  policyBaseUrl?: string;
  /** The GPU activities' schedule-to-start limit (`recovery.gpu_queue_wait_ms`; default: activity-options.ts). */
  gpuQueueWaitMs?: number;
  /** Backoff before refills and step retries (default: activity-options.ts). */
  infraBackoff?: InfraBackoff;
  /** This step's groups when the previous step sampled them ahead (`max_staleness` > 0); else it samples them. */
  sampled?: SampledStep;
  /** Sample the next step's groups while this step's update runs (`max_staleness` > 0 and a step follows). */
  sampleNext?: boolean;
  /** `task_order: epoch`: where the campaign's task stream stands before this step draws (absent: its start). */
  taskCursor?: TaskCursor;
}

/** A step's record, the next step's groups when it sampled them ahead, and the task stream's cursor after both. */
export interface TrainingStepResult extends StepRecord {
  next?: SampledStep;
  taskCursor?: TaskCursor;
}

interface GroupResult extends DrawnGroup {
  episodes: EpisodeSummary[];
}

/** What one step's sampling shares: the step its episode ids name, the episode config, the slots, the sync gate. */
interface Sampling {
  step: number;
  /** Version the servers hold when the sampling starts. */
  startVersion: number;
  /** Version the learner trains these episodes from: one lagging more than max_staleness behind it is refilled. */
  trainVersion: number;
  /** The episodes' config; an overlapped step swaps in the new weight version after a sync between episodes. */
  episode: EpisodeConfig;
  /** Episodes in flight across all groups, bounded by training.concurrency. */
  slots: ConcurrencySlots;
  /**
   * Closed while weights are synced: no episode starts, and the sync waits until none is in flight (with
   * `partial_rollouts`, it does not wait: the servers cut the generations in flight short and they go on after).
   */
  gateClosed: boolean;
  done: boolean;
  /** The export the servers hold (`episode.policy.weight_version`'s): what a server that lost it gets again. */
  weightsPath?: string;
  /** A re-sync of servers that served other weights, while one runs (episodes that meet it share it). */
  resync?: Promise<void>;
}

function samplingOf(input: TrainingStepInput, step: number, trainVersion: number): Sampling {
  return {
    step,
    startVersion: sampledWeightVersion(input),
    trainVersion,
    // Partial rollouts: a sync may interrupt an episode, whose next completions the new weights serve.
    episode: input.training.partial_rollouts
      ? { ...input.episode, policy: { ...input.episode.policy, newer_weights: true } }
      : input.episode,
    slots: new ConcurrencySlots(input.training.concurrency),
    gateClosed: false,
    done: false,
    ...(input.weightsPath ? { weightsPath: input.weightsPath } : {}),
  };
}

export async function trainingStepWorkflow(input: TrainingStepInput): Promise<TrainingStepResult> {
  const t = input.training;
  const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('10 minutes', 10));
  // Steps started before the slots, refill backoff and step retries replay their recorded commands.
  const current = patched('step-slots-backoff');
  // Histories from before overlapped steps never asked: only a campaign with max_staleness > 0 takes that path.
  const overlapped = t.max_staleness > 0 && patched('overlapped-steps');
  // Only campaigns with the epoch order ask: recorded histories never had it.
  const from =
    t.task_order === 'epoch' && patched('epoch-task-order') ? (input.taskCursor ?? firstTaskCursor) : undefined;
  let sample = overlapped && input.sampled?.step === input.step ? input.sampled : undefined;
  if (!sample) {
    setCurrentDetails(`sampling groups of ${t.group_size} for step ${input.step}`);
    sample = await sampleGroups(input, samplingOf(input, input.step, sampledWeightVersion(input)), current, from);
  }
  // Groups sampled ahead were drawn before this step started: the cursor it got is already past them.
  const afterSample = sample.taskCursor ?? from;
  if (sample.informativeGroups < t.groups_per_step)
    log.warn('fewer informative groups than configured', {
      step: input.step,
      informative: sample.informativeGroups,
      wanted: t.groups_per_step,
      fallback: sample.fallback,
    });
  const trained = `learner update on ${sample.groups.length} groups (${sample.informativeGroups} informative)`;
  const items = advantageItems(sample, t.normalize_std);
  if (!overlapped || !input.sampleNext) {
    setCurrentDetails(`${trained}, then export and weight sync`);
    const policy = await updatePolicy(input, items);
    // No await on the usual path: the commands keep the order recorded histories have.
    const record =
      policy.update.batchMatches === false
        ? await trainedStepRecord(input, sample, policy, bookkeeping)
        : stepRecord(input, sample, policy);
    await bookkeeping.recordStep(record);
    return afterSample ? { ...record, taskCursor: afterSample } : record;
  }
  // Overlapped: the next step's episodes run on the weights the servers hold while this update trains; its
  // weights are synced between episodes as soon as they are exported, and the step is recorded at once.
  setCurrentDetails(`${trained} while step ${input.step + 1} samples on weight version ${input.weightVersion}`);
  const next = samplingOf(input, input.step + 1, input.step);
  const [record, nextSample] = await Promise.all([
    updatePolicy(input, items, next).then(async (policy) => {
      const r =
        policy.update.batchMatches === false
          ? await trainedStepRecord(input, sample, policy, bookkeeping)
          : stepRecord(input, sample, policy);
      await bookkeeping.recordStep(r);
      return r;
    }),
    sampleGroups(input, next, current, afterSample).finally(() => {
      next.done = true;
    }),
  ]);
  const taskCursor = nextSample.taskCursor ?? afterSample;
  return { ...record, next: nextSample, ...(taskCursor ? { taskCursor } : {}) };
}

/** Steps started by older code carry policyBaseUrl and no version: they keep working after a deploy. */
function sampledWeightVersion(input: TrainingStepInput): number {
  return input.weightVersion ?? input.step - 1;
}

/**
 * Runs one group: G episodes, then one refill per lost one up to the cap. `attempt.retry` is the step retry
 * whose fresh episode ids the episodes take.
 */
function groupRunner(input: TrainingStepInput, sampling: Sampling, current: boolean, attempt: { retry: number }) {
  // A pool listing a uid twice could draw it twice in one step: then activities keep sequence-number ids.
  const uniqueIds = new Set(input.pool).size === input.pool.length;
  const t = input.training;
  const { step, slots } = sampling;
  let inFlight = 0;
  let done = 0;
  const showSampling = () =>
    setCurrentDetails(
      `sampling step ${step}: ${done} episodes done, ${inFlight} in flight` +
        (attempt.retry ? ` (step retry ${attempt.retry})` : ''),
    );
  const episode = async (uid: string, rep: number): Promise<EpisodeSummary> => {
    if (current) await slots.acquire(() => !sampling.gateClosed);
    else await condition(() => inFlight < t.concurrency);
    inFlight += 1;
    showSampling();
    let summary: EpisodeSummary;
    try {
      const retry = attempt.retry ? `~retry-${attempt.retry}` : '';
      const activityInput: EpisodeActivityInput = {
        episodeId: `${input.campaignId}/step-${step}/${uid}#${rep}${retry}`,
        suiteDir: input.suiteDir,
        taskUid: uid,
        purpose: 'train',
        campaign: input.campaignId,
        step,
        repetition: rep,
        config: sampling.episode,
      };
      summary = await runEpisodeOrInfraError(input.rolloutQueue, activityInput, uniqueIds);
    } finally {
      inFlight -= 1;
      done += 1;
      showSampling();
      if (current) slots.release();
    }
    // A server sampled with other weights than the campaign's (it restarted on its own, say): synced again before
    // the episode is refilled. Histories from before the check never saw such a cause: replay never gets here.
    if (servedOtherWeights(summary) && patched('resync-served-weights')) await resyncServedWeights(input, sampling);
    return summary;
  };

  // An episode whose oldest token was sampled from weights more than max_staleness versions behind the ones the
  // learner trains from (one recorded before a restart, say) is dropped and refilled like a lost one; one without a
  // version: current.
  const isStale = (e: EpisodeSummary) =>
    sampling.trainVersion - (oldestVersion(e) ?? sampling.trainVersion) > t.max_staleness;
  return async (uid: string): Promise<GroupResult> => {
    const first = await Promise.all(Array.from({ length: t.group_size }, (_, rep) => episode(uid, rep)));
    // The task's own test raised twice (task_error): its group is never trained on and nothing is refilled, since
    // a refill meets the same test; the group is replaced like a lost one and the step record names the cause.
    const taskError = first.find((e) => e.outcome === 'task_error');
    if (taskError) {
      const infraErrors = first.filter((e) => e.outcome === 'infrastructure_error').length;
      const cause = taskError.cause ?? `task ${uid}: its test raised`;
      return { uid, episodes: [], rewards: [], lost: true, infraErrors, stale: 0, taskError: cause };
    }
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

/** An episode failed because a policy server answered with other weights than it expected (served-weights.ts). */
function servedOtherWeights(summary: EpisodeSummary): boolean {
  return summary.outcome === 'infrastructure_error' && (summary.cause ?? '').startsWith(SERVED_WEIGHTS_MISMATCH);
}

/**
 * The campaign's servers brought back to the version the step samples on: each is synced only when it reports
 * another label (the embedded server restarted when it cannot take them; the episodes then use its address). One
 * re-sync at a time: episodes that meet other weights meanwhile wait for it.
 */
function resyncServedWeights(input: TrainingStepInput, sampling: Sampling): Promise<void> {
  sampling.resync ??= (async () => {
    const gpu = withMissingPollerNamed(
      proxyActivities<GpuActivities>(gpuOptions(input.gpuQueue, '1 hour', input.gpuQueueWaitMs)),
      input.gpuQueue,
    );
    const want = {
      campaignId: input.campaignId,
      weightVersion: sampling.episode.policy.weight_version ?? sampling.startVersion,
      ...(sampling.weightsPath ? { weightsPath: sampling.weightsPath } : {}),
      basePath: input.learner.model_path,
      deadlineMs: input.episode.policy.sync_deadline_ms,
      ...loraServing(input.learner),
      ...logprobsServing(input.learner),
    };
    log.warn('a policy server sampled with other weights: syncing the campaign servers again', {
      step: sampling.step,
      weightVersion: want.weightVersion,
    });
    if (want.weightVersion > 0 && !want.weightsPath) return; // an older step input: the campaign's pause re-syncs
    if (input.embeddedEngine) {
      const server = await gpu.ensurePolicyServer({ ...want, engine: input.embeddedEngine });
      const policy = { ...sampling.episode.policy, base_url: server.baseUrl, model: server.model };
      sampling.episode = { ...sampling.episode, policy };
    } else await gpu.ensurePolicyWeights({ ...want, servers: input.policyServers });
  })().finally(() => {
    sampling.resync = undefined;
  });
  return sampling.resync;
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

/**
 * One step's groups, sampled (see drawTrainedGroups) and made plain for the update and the record; with the epoch
 * order (`from` set), the stream's cursor past the tasks drawn.
 */
async function sampleGroups(
  input: TrainingStepInput,
  sampling: Sampling,
  current: boolean,
  from?: TaskCursor,
): Promise<SampledStep> {
  const started = Date.now();
  const { selection, taskCursor } = await drawTrainedGroups(input, sampling, current, from);
  const { step, startVersion, trainVersion } = sampling;
  const sampled = sampledStep(selection, { step, startVersion, trainVersion, seconds: (Date.now() - started) / 1000 });
  return taskCursor ? { ...sampled, taskCursor } : sampled;
}

/** The order a step's rounds take; with the epoch order, the stream's cursor after each task of it. */
function stepOrder(
  input: TrainingStepInput,
  step: number,
  from?: TaskCursor,
): { uids: string[]; cursors?: TaskCursor[] } {
  const t = input.training;
  // Enough for the first round and every replacement: a step draws no more.
  if (from) return epochTaskWindow(input.pool, input.seed, from, t.groups_per_step + t.max_replacements);
  // Steps recorded before task_order existed carry no field: the seeded order, as they ran.
  if (t.task_order === 'by_family')
    return { uids: familyStepTaskOrder(input.pool, input.seed, step, t.groups_per_step) };
  return { uids: stepTaskOrder(input.pool, input.seed, step) };
}

/**
 * The step's groups, drawn again with fresh episode ids while every group is lost (at most lostStepRetries). Each
 * attempt starts at the front of the step's order, so the stream's cursor moves past the most tasks one attempt drew.
 */
async function drawTrainedGroups(
  input: TrainingStepInput,
  sampling: Sampling,
  current: boolean,
  from?: TaskCursor,
): Promise<{ selection: GroupSelection<GroupResult>; taskCursor?: TaskCursor }> {
  const t = input.training;
  const { step } = sampling;
  const attempt = { retry: 0 };
  const runGroup = groupRunner(input, sampling, current, attempt);
  const order = stepOrder(input, step, from);
  const earlierAttempts: GroupResult[] = [];
  let drawn = 0;
  for (;;) {
    const selection = await drawGroups(order.uids, t, runGroup, earlierAttempts);
    drawn = Math.max(drawn, selection.informative.length + selection.zeroVariance.length + selection.lost.length);
    const taskCursor = order.cursors && drawn > 0 ? order.cursors[drawn - 1] : from;
    // Every group lost to infrastructure errors: nothing to train on. Wait, then start over with fresh ids.
    if (!current || selection.informative.length > 0 || selection.zeroVariance.length > 0)
      return { selection, ...(taskCursor ? { taskCursor } : {}) };
    if (attempt.retry >= lostStepRetries)
      throw ApplicationFailure.nonRetryable(
        `step ${step}: every group was lost to infrastructure errors (${selection.lostGroups} groups, ` +
          `${selection.infraErrors} infrastructure errors, ${attempt.retry} retries); the campaign pauses until ` +
          `resumed`,
        stepLostFailureType,
      );
    attempt.retry += 1;
    log.warn('every group of the step was lost; retrying after backoff', { step, stepRetry: attempt.retry });
    await sleep(infraBackoffMs(attempt.retry, input.infraBackoff));
    earlierAttempts.push(...selection.lost);
  }
}

/** Each trained episode with its group-relative advantage. */
function advantageItems(sample: SampledStep, normalizeStd: boolean): { episodeId: string; advantage: number }[] {
  return sample.groups.flatMap((g) => {
    const advantages = groupAdvantages(
      g.episodes.map((e) => e.reward),
      normalizeStd,
    );
    return g.episodes.map((e, i) => ({ episodeId: e.id, advantage: advantages[i]! }));
  });
}

/**
 * The learner update, the export of its weights, and their sync to every policy server. With `sampling` (the next
 * step's, running alongside), the sync waits between episodes: no new one starts, those in flight finish on the
 * weights they started with, then the servers load the new ones and the next episodes record the new version.
 */
async function updatePolicy(
  input: TrainingStepInput,
  items: { episodeId: string; advantage: number }[],
  sampling?: Sampling,
) {
  const gpu = withMissingPollerNamed(
    proxyActivities<GpuActivities>(gpuOptions(input.gpuQueue, '4 hours', input.gpuQueueWaitMs)),
    input.gpuQueue,
  );
  // Steps started by older code carry policyBaseUrl: they keep working after a deploy.
  const policyServers = input.policyServers ?? (input.policyBaseUrl ? [input.policyBaseUrl] : []);
  const stepId = input.step;
  const started = Date.now();
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
  const updated = Date.now();
  const syncing = sampling !== undefined && !sampling.done;
  // Partial rollouts: the episodes in flight are interrupted, not waited for. Only campaigns that ask take the path.
  const interrupt = syncing && input.training.partial_rollouts === true && patched('partial-rollouts');
  if (syncing) {
    sampling.gateClosed = true;
    if (!interrupt) await condition(() => sampling.done || sampling.slots.inFlight === 0);
  }
  const drained = Date.now();
  try {
    // The next step samples only from servers that all hold this step's weights (version = step).
    const synced = await gpu.syncWeights({
      campaignId: input.campaignId,
      servers: policyServers,
      engine: input.embeddedEngine,
      weightsPath: exported.path,
      weightVersion: stepId,
      // Only when asked: the default's activity input stays as recorded histories have it.
      ...(input.episode.policy.weight_transport === 'collective' ? { transport: 'collective' as const } : {}),
      ...(input.learner.weight_transport_host ? { transportHost: input.learner.weight_transport_host } : {}),
      ...(interrupt ? { interrupt: true } : {}),
      basePath: input.learner.model_path,
      deadlineMs: input.episode.policy.sync_deadline_ms,
      ...loraServing(input.learner),
      ...logprobsServing(input.learner),
    });
    if (syncing) {
      sampling.episode = onSyncedWeights(sampling.episode, synced, input.embeddedEngine !== undefined);
      sampling.weightsPath = exported.path;
    }
    const seconds = { update: (updated - started) / 1000, drain: (drained - updated) / 1000 };
    return { update, exported, synced, seconds: { ...seconds, sync: (Date.now() - drained) / 1000 } };
  } finally {
    if (syncing) sampling.gateClosed = false;
  }
}

/** The episode config after a sync: the new version, and the embedded server's address (a failed sync moves it). */
function onSyncedWeights(
  episode: EpisodeConfig,
  synced: { weightVersion: number; servers?: { baseUrl: string }[] },
  embedded: boolean,
): EpisodeConfig {
  const moved = embedded ? synced.servers?.[0]?.baseUrl : undefined;
  return {
    ...episode,
    policy: { ...episode.policy, weight_version: synced.weightVersion, ...(moved ? { base_url: moved } : {}) },
  };
}

function stepRecord(
  input: TrainingStepInput,
  sample: SampledStep,
  { update, exported, synced, seconds }: Awaited<ReturnType<typeof updatePolicy>>,
): StepRecord {
  return {
    campaignId: input.campaignId,
    step: input.step,
    ...batchFields(sample.groups),
    informativeGroups: sample.informativeGroups,
    zeroVarianceGroups: sample.zeroVarianceGroups,
    replacements: sample.replacements,
    lostGroups: sample.lostGroups,
    infraErrors: sample.infraErrors,
    ...(sample.taskErrors ? { taskErrorGroups: sample.taskErrors } : {}),
    fallback: sample.fallback,
    update: update.metrics,
    repeatedUpdate: update.repeated,
    checkpoint: update.checkpoint,
    exportPath: exported.path,
    weightVersion: synced.weightVersion,
    sampledWeightVersion: sample.startVersion,
    staleEpisodes: sample.staleEpisodes,
    syncSeconds: (synced.servers ?? []).map((s) => s.seconds), // absent in results of older activity code
    episodeLag: episodeLag(sample),
    ...versionMixField(sample.groups),
    phaseSeconds: { sample: sample.seconds, ...seconds },
  };
}

/**
 * The record of a step the learner had trained on another batch than the one drawn (trained-batch-record.ts),
 * called only then (`batchMatches` false): recorded histories replay without the patch's marker. The trained
 * episodes this run did not draw are read from the episode store.
 */
async function trainedStepRecord(
  input: TrainingStepInput,
  sample: SampledStep,
  policy: Awaited<ReturnType<typeof updatePolicy>>,
  bookkeeping: ActivityInterfaceFor<CampaignActivities>,
): Promise<StepRecord> {
  const record = stepRecord(input, sample, policy);
  if (!patched('trained-batch-record')) return record;
  const ids = policy.update.trainedEpisodeIds;
  const missing = ids ? episodesToRead(sample, ids) : [];
  const read = missing.length ? await bookkeeping.trainedEpisodes({ episodeIds: missing }) : [];
  log.warn('the learner had trained this step on another batch: the record names the batch trained', {
    step: input.step,
    trained: ids?.length ?? null,
    drawn: sample.groups.reduce((n, g) => n + g.episodes.length, 0),
  });
  return trainedBatchRecord(record, sample, ids, read);
}

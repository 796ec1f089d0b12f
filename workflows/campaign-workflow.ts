import {
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  condition,
  ContinueAsNew,
  continueAsNew,
  defineQuery,
  defineSignal,
  executeChild,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { CampaignActivities, StepRecord } from '../activities/campaign-activities.ts';
import type { EpisodeActivities } from '../activities/episode-activities.ts';
import type { GpuActivities } from '../activities/gpu-activities.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { evaluationWorkflow, type EvaluationResult } from './evaluation-workflow.ts';
import { probeWorkflow, type ProbeResult } from './probe-workflow.ts';
import { campaignAttributes, campaignKey, pausedKey, stageKey, stepKey } from './search-attribute-keys.ts';
import { campaignDetails } from './campaign-details.ts';
import { withMissingPollerNamed } from './missing-poller.ts';
import { evaluationSummary, probeSummary as probeStaticSummary, trainingStepSummary } from './ui-text.ts';
import { startLearnerNodes } from './learner-nodes.ts';
import { stepLostFailureType, trainingStepWorkflow } from './training-step-workflow.ts';
import {
  bookkeepingOptions,
  defaultMaxReruns,
  gpuOptions,
  nonFiniteStepsBeforePause,
  policyQuestionOptions,
} from './activity-options.ts';

/**
 * The six-stage loop as one durable workflow: ingest -> probe -> select -> training steps -> evaluation ->
 * report. Each training step is a child workflow `<campaign>/step-<n>`; the campaign continues as new after
 * every step with a compact state, so its history stays small however long it runs. Signals pause,
 * resume and stop-after-step; the `status` query answers at any time.
 */

export type Stage = 'ingest' | 'probe' | 'evaluate-before' | 'train' | 'evaluate-after' | 'report' | 'done' | 'stopped';

export interface CampaignState {
  stage: Stage;
  step: number;
  candidates?: number;
  probe?: Omit<ProbeResult, 'pool'>;
  pool?: string[];
  /** Every candidate, kept only when evaluation.tasks is 'all'. */
  allTasks?: string[];
  /** The tasks kept out of training, kept only when evaluation.tasks is 'held_out'. */
  heldOutTasks?: string[];
  manifest?: string;
  weightsPath?: string;
  /** Weight version the policy servers hold: the last trained step (0 = the base weights). */
  weightVersion?: number;
  lastStep?: Pick<
    StepRecord,
    'step' | 'meanReward' | 'informativeGroups' | 'infraErrors' | 'leakedInfraEpisodes' | 'fallback'
  > & { loss: unknown };
  evalBefore?: EvaluationResult;
  evalAfter?: EvaluationResult;
  report?: { html: string; markdown: string };
  paused: boolean;
  /** Why the campaign paused itself (a training step lost every group); cleared by resume. */
  pauseReason?: string;
  stopAfterStep: boolean;
  /** Training steps in a row whose update the learner skipped as non-finite; reset by a finite one or a resume. */
  nonFiniteInARow?: number;
}

export interface CampaignInput {
  campaignId: string;
  config: CampaignConfig;
  /** Absolute suite folder (resolved by the CLI). */
  suiteDir: string;
  excludeUidsFile?: string;
  /** Absolute price table file (resolved by the CLI from config.prices). */
  pricesFile?: string;
  /** `gpu`: node 0's GPU worker; `gpuNodes`: every learner node's, in node-rank order (only for several nodes). */
  queues: { rollout: string; gpu: string; gpuNodes?: string[] };
  state?: CampaignState;
}

export interface CampaignStatus extends Omit<CampaignState, 'pool'> {
  campaignId: string;
  poolSize: number;
  steps: number;
}

/** Pause before the next training step; the optional reason shows in `status` and the UI's current details. */
export const pauseSignal = defineSignal<[{ reason?: string }?]>('pause');
export const resumeSignal = defineSignal('resume');
export const stopAfterStepSignal = defineSignal('stopAfterStep');
export const statusQuery = defineQuery<CampaignStatus>('status');

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('30 minutes', 10));

/**
 * A campaign that fails or is cancelled releases its learner and policy servers (GPUs stay held otherwise);
 * a stopped or finished one releases them in its report stage. Continue-as-new is not an end.
 */
export async function campaignWorkflow(input: CampaignInput): Promise<CampaignStatus> {
  try {
    return await campaignStages(input);
  } catch (err) {
    if (!(err instanceof ContinueAsNew)) {
      const gpu = withMissingPollerNamed(
        proxyActivities<GpuActivities>(gpuOptions(input.queues.gpu, '10 minutes')),
        input.queues.gpu,
      );
      await CancellationScope.nonCancellable(() =>
        gpu.stopLearner({ campaignId: input.campaignId }).catch((stopErr: unknown) => {
          log.error('could not release the learner after the campaign ended', { error: String(stopErr) });
        }),
      );
    }
    throw err;
  }
}

/** What every stage of one campaign run works with. */
interface CampaignRun {
  input: CampaignInput;
  state: CampaignState;
  gpu: ReturnType<typeof proxyActivities<GpuActivities>>;
  /** True while waiting paused before a training step (the UI's details say "paused", not "pause requested"). */
  waitingPaused?: boolean;
}

async function campaignStages(input: CampaignInput): Promise<CampaignStatus> {
  const state: CampaignState = input.state ?? { stage: 'ingest', step: 0, paused: false, stopAfterStep: false };
  const run: CampaignRun = {
    input,
    state,
    gpu: withMissingPollerNamed(
      proxyActivities<GpuActivities>(gpuOptions(input.queues.gpu, '1 hour')),
      input.queues.gpu,
    ),
  };
  setCampaignHandlers(run);
  if (!input.state) upsertMemo({ config: input.config });

  if (state.stage === 'ingest') await ingest(run);
  if (state.stage === 'evaluate-before') {
    state.evalBefore = await evaluate(run, 'before');
    state.stage = 'train';
    await continueAsNew<typeof campaignWorkflow>({ ...input, state });
  }
  if (state.stage === 'train') await train(run);
  if (state.stage === 'evaluate-after') {
    state.evalAfter = await evaluate(run, 'after');
    state.stage = 'report';
  }
  if (state.stage === 'report' || state.stage === 'stopped') await report(run);
  return campaignStatus(run);
}

function campaignStatus({ input, state }: CampaignRun): CampaignStatus {
  const { pool, allTasks: _all, heldOutTasks: _heldOut, ...rest } = state;
  return { ...rest, campaignId: input.campaignId, poolSize: pool?.length ?? 0, steps: input.config.training.steps };
}

function setCampaignHandlers(run: CampaignRun): void {
  const { state } = run;
  setHandler(statusQuery, () => campaignStatus(run));
  setHandler(pauseSignal, (request) => {
    state.paused = true;
    if (request?.reason) state.pauseReason = request.reason;
    flagPaused(true);
    showDetails(run);
  });
  setHandler(resumeSignal, () => {
    state.paused = false;
    state.pauseReason = undefined;
    state.nonFiniteInARow = undefined;
    flagPaused(false);
    showDetails(run);
  });
  setHandler(stopAfterStepSignal, () => {
    state.stopAfterStep = true;
    showDetails(run);
  });
}

/**
 * `TbtPaused` mirrors `state.paused` (a requested pause included, so `TbtPaused = true` finds it at once), set
 * where the flag changes. Runs recorded before the attribute existed never upserted it: replay keeps them so.
 */
function flagPaused(paused: boolean): void {
  if (patched('campaign-paused-attribute')) upsertSearchAttributes([{ key: pausedKey, value: paused }]);
}

/** The UI's current-details line (campaign-details.ts); metadata only, no command, so replay is unaffected. */
function showDetails({ input, state, waitingPaused }: CampaignRun): void {
  setCurrentDetails(campaignDetails(input.campaignId, state, input.config.training.steps, waitingPaused === true));
}

function enter({ input, state }: CampaignRun, stage: Stage): void {
  const { campaignId } = input;
  state.stage = stage;
  upsertSearchAttributes([
    { key: campaignKey, value: campaignId },
    { key: stageKey, value: stage },
    { key: stepKey, value: state.step },
  ]);
  setCurrentDetails(campaignDetails(campaignId, state, input.config.training.steps, false));
  log.info('campaign stage', { campaignId, stage, step: state.step });
}

/**
 * The episode config with the policy endpoint resolved (the embedded server may move after a restart) and
 * every policy server brought to the campaign's current weights, which each episode then records. An
 * external server that was restarted, or still holds another campaign's weights, is synced here.
 */
async function episodeConfig({ input, state, gpu }: CampaignRun): Promise<{
  episode: EpisodeConfig;
  policyServers: string[];
}> {
  const { campaignId, config } = input;
  const policy = config.episode.policy;
  const want = {
    campaignId,
    weightVersion: state.weightVersion ?? 0,
    weightsPath: state.weightsPath,
    basePath: config.learner.model_path,
    deadlineMs: policy.sync_deadline_ms,
  };
  if (policy.base_url !== 'embedded') {
    const servers = policy.sync_instances ?? [policy.base_url];
    // Campaigns started before external servers were synced never made this call: replay must not see it.
    if (patched('sync-external-policy-servers')) await gpu.ensurePolicyWeights({ ...want, servers });
    return {
      episode: { ...config.episode, policy: { ...policy, weight_version: want.weightVersion } },
      policyServers: servers,
    };
  }
  // Inputs from before the engine switch ran the built-in server: a deploy must not move them to vLLM.
  const server = await gpu.ensurePolicyServer({ ...want, engine: policy.engine ?? 'builtin' });
  return {
    episode: {
      ...config.episode,
      policy: { ...policy, base_url: server.baseUrl, model: server.model, weight_version: want.weightVersion },
    },
    policyServers: [server.baseUrl],
  };
}

/** The keyed-episodes input (keyed-episodes.ts) of a probe or an evaluation. */
function keyedInput(
  { input }: CampaignRun,
  episode: EpisodeConfig,
  uids: string[],
  stage: { repeats: number; concurrency: number; shard_size?: number },
) {
  return {
    uids,
    repeats: stage.repeats,
    concurrency: stage.concurrency,
    shardSize: stage.shard_size,
    episode,
    suiteDir: input.suiteDir,
    campaignId: input.campaignId,
    rolloutQueue: input.queues.rollout,
    maxReruns: defaultMaxReruns,
  };
}

async function ingest(run: CampaignRun): Promise<void> {
  const { input, state, gpu } = run;
  const { campaignId, config } = input;
  enter(run, 'ingest');
  const { uids, evaluationUids, heldOutUids } = await bookkeeping.ingestCandidates({
    campaignId,
    suiteDir: input.suiteDir,
    excludeUidsFile: input.excludeUidsFile,
    maxCandidates: config.probe.max_candidates,
    evaluationTasks: config.evaluation.tasks,
  });
  state.candidates = uids.length;
  // Every suite task, evaluation-only ones included (histories recorded before the field existed: the candidates).
  if (config.evaluation.tasks === 'all') state.allTasks = evaluationUids ?? uids;
  if (config.evaluation.tasks === 'held_out') state.heldOutTasks = heldOutUids;
  const learnerInput = {
    campaignId,
    learner: config.learner,
    seed: config.seed,
    samplingTemperature: config.episode.sampling.temperature,
  };
  // Node 0 answers only once every node's ranks joined: the other nodes start beside it.
  const [learner] = await Promise.all([
    gpu.startLearner(learnerInput),
    startLearnerNodes(input.queues.gpuNodes, learnerInput),
  ]);
  state.manifest = await bookkeeping.writeManifest({
    campaignId,
    manifest: {
      campaignId,
      workflowId: workflowInfo().workflowId,
      config,
      learner: learner.manifest,
      ...(await policyManifestEntry(run)),
    },
  });
  // Configs recorded before probe.enabled existed have no such field: they probed.
  if (config.probe.enabled === false) state.pool = uids;
  else state.pool = await probeCandidates(run, uids);
  state.stage = config.evaluation.before_training ? 'evaluate-before' : 'train';
}

/**
 * How the policy's chat template takes system messages (merged when it refuses a second one), asked of the
 * policy server on the rollout queue, where its API key lives. This starts an embedded server at ingest rather
 * than at the probe. Campaigns recorded before the entry existed never asked: replay must not see the calls.
 */
async function policyManifestEntry(run: CampaignRun): Promise<{ policy?: Record<string, unknown> }> {
  if (!patched('manifest-system-messages')) return {};
  const { episode } = await episodeConfig(run);
  const rollout = withMissingPollerNamed(
    proxyActivities<EpisodeActivities>(policyQuestionOptions(run.input.queues.rollout)),
    run.input.queues.rollout,
  );
  return { policy: await rollout.policySystemMessages({ policy: episode.policy }) };
}

async function probeCandidates(run: CampaignRun, uids: string[]): Promise<string[]> {
  const { campaignId, config } = run.input;
  enter(run, 'probe');
  const { episode } = await episodeConfig(run);
  const probe = await executeChild(probeWorkflow, {
    workflowId: `${campaignId}/probe`,
    staticSummary: probeStaticSummary(uids.length, config.probe.repeats),
    typedSearchAttributes: campaignAttributes(campaignId, 'probe', run.state.step),
    args: [
      {
        ...keyedInput(run, episode, uids, config.probe),
        minCleanRuns: config.probe.min_clean_runs,
        retainBands: config.probe.retain_bands,
      },
    ],
  });
  const { pool, ...probeSummary } = probe;
  run.state.probe = probeSummary;
  return pool;
}

async function evaluate(run: CampaignRun, label: 'before' | 'after'): Promise<EvaluationResult> {
  const { input, state } = run;
  const { campaignId, config } = input;
  enter(run, `evaluate-${label}`);
  const { episode } = await episodeConfig(run);
  const uids = { pool: state.pool, all: state.allTasks, held_out: state.heldOutTasks }[config.evaluation.tasks]!;
  return executeChild(evaluationWorkflow, {
    workflowId: `${campaignId}/eval-${label}`,
    staticSummary: evaluationSummary(`evaluation ${label} training`, uids.length, config.evaluation.repeats),
    typedSearchAttributes: campaignAttributes(campaignId, `evaluate-${label}`, state.step),
    args: [{ ...keyedInput(run, episode, uids, config.evaluation), label, prices: input.pricesFile }],
  });
}

/** One training step per run of the campaign workflow (it continues as new after each), then the next stage. */
async function train(run: CampaignRun): Promise<void> {
  const { input, state } = run;
  const { campaignId, config } = input;
  if (state.step < config.training.steps && !state.stopAfterStep) {
    enter(run, 'train');
    await waitWhilePaused(run);
  }
  if (state.step < config.training.steps && !state.stopAfterStep) {
    const step = state.step + 1;
    const { record, lost } = await trainingStep(run, step);
    if (!record) {
      // Infrastructure, not the campaign, is at fault: pause with the reason visible in `status`; resume retries.
      state.paused = true;
      state.pauseReason = lost;
      showDetails(run);
      log.warn('campaign paused: a training step lost every group', { campaignId, step, reason: lost });
      return continueAsNew<typeof campaignWorkflow>({ ...input, state });
    }
    state.step = step;
    state.weightsPath = record.exportPath;
    state.weightVersion = record.weightVersion;
    state.lastStep = {
      step,
      meanReward: record.meanReward,
      informativeGroups: record.informativeGroups,
      infraErrors: record.infraErrors,
      leakedInfraEpisodes: record.leakedInfraEpisodes,
      fallback: record.fallback,
      loss: record.update.loss,
    };
    pauseOnNonFiniteRun(run, record);
    // Signals that arrived during the step are part of `state` and survive the continue-as-new.
    await continueAsNew<typeof campaignWorkflow>({ ...input, state });
  }
  state.stage = state.step < config.training.steps ? 'stopped' : 'evaluate-after';
}

/**
 * The learner skips an update whose loss or gradient is not finite (the step is recorded, the weights unchanged),
 * as verl does; a run of them (a NaN in the weights, a learning rate far too high) pauses the campaign with the
 * reason instead of training on. Learners from before the skip failed such a step, so no recorded history has one.
 */
function pauseOnNonFiniteRun(run: CampaignRun, record: StepRecord): void {
  const { state } = run;
  state.nonFiniteInARow = record.update.non_finite === true ? (state.nonFiniteInARow ?? 0) + 1 : undefined;
  const inARow = state.nonFiniteInARow ?? 0;
  if (inARow < nonFiniteStepsBeforePause) return;
  state.paused = true;
  state.pauseReason =
    `${inARow} training steps in a row (up to step ${state.step}) had a non-finite loss or gradient and ` +
    `their updates were skipped; check the learning rate, the data and the learner log, then ` +
    `\`tbt campaign resume\` (or stop)`;
  flagPaused(true);
  showDetails(run);
  log.warn('campaign paused: non-finite updates in a row', { campaignId: run.input.campaignId, inARow });
}

/** Waits while paused (and not asked to stop), with `TbtPaused = true` for the wait. */
async function waitWhilePaused(run: CampaignRun): Promise<void> {
  const { state } = run;
  const waits = state.paused && !state.stopAfterStep;
  // A run continued as new after pausing itself (a lost step) sets the attribute here.
  if (waits) flagPaused(true);
  run.waitingPaused = waits;
  showDetails(run);
  await condition(() => !state.paused || state.stopAfterStep);
  run.waitingPaused = false;
  showDetails(run);
}

/** The step's child workflow; a step that lost every group to infrastructure errors yields its reason instead. */
async function trainingStep(run: CampaignRun, step: number): Promise<{ record?: StepRecord; lost?: string }> {
  const { input, state } = run;
  const { campaignId, config } = input;
  const { episode, policyServers } = await episodeConfig(run);
  let lost: string | undefined;
  const record = await executeChild(trainingStepWorkflow, {
    workflowId: `${campaignId}/step-${step}`,
    staticSummary: trainingStepSummary(
      step,
      config.training.steps,
      config.training.groups_per_step,
      config.training.group_size,
    ),
    typedSearchAttributes: campaignAttributes(campaignId, 'train', step),
    args: [
      {
        campaignId,
        step,
        pool: state.pool!,
        suiteDir: input.suiteDir,
        episode,
        training: config.training,
        learner: config.learner,
        seed: config.seed,
        rolloutQueue: input.queues.rollout,
        gpuQueue: input.queues.gpu,
        ...(input.queues.gpuNodes ? { gpuNodeQueues: input.queues.gpuNodes } : {}),
        policyServers,
        embeddedEngine: config.episode.policy.base_url === 'embedded' ? config.episode.policy.engine : undefined,
        weightVersion: state.weightVersion ?? 0,
      },
    ],
  }).catch((err: unknown) => {
    const cause = err instanceof ChildWorkflowFailure ? err.cause : undefined;
    if (!(cause instanceof ApplicationFailure && cause.type === stepLostFailureType)) throw err;
    lost = cause.message;
    return undefined;
  });
  return { record, lost };
}

async function report(run: CampaignRun): Promise<void> {
  const { input, state, gpu } = run;
  const { campaignId, config } = input;
  const stopped = state.stage === 'stopped';
  enter(run, 'report');
  // Stopped while paused, or a pause requested with no training step left: nothing waits for a resume any more.
  if (state.paused) flagPaused(false);
  const costs = input.pricesFile
    ? await bookkeeping.campaignCosts({
        campaignId,
        prices: input.pricesFile,
        hourlyPriceUsd: config.learner.hourly_price_usd,
        learnerProcesses: config.learner.nodes * config.learner.gpus_per_node,
      })
    : undefined;
  state.report = await bookkeeping.writeReport({
    campaignId,
    title: `Campaign ${campaignId}`,
    probe: state.probe?.aggregates,
    before: state.evalBefore?.aggregate,
    after: state.evalAfter?.aggregate,
    costs,
  });
  // The learner and the embedded policy server hold a GPU (or CPU cores): release them.
  await gpu.stopLearner({ campaignId });
  enter(run, stopped ? 'stopped' : 'done');
}

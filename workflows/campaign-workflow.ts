import {
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  condition,
  ContinueAsNew,
  makeContinueAsNewFunc,
  defineQuery,
  defineSignal,
  defineUpdate,
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
import { logprobsServing, loraServing } from '../config/lora-serving.ts';
import { withJudgeMode } from '../config/stage-judge-mode.ts';
import { evaluationWorkflow, type EvaluationResult } from './evaluation-workflow.ts';
import { probeWorkflow, type ProbeResult } from './probe-workflow.ts';
import { campaignAttributes, campaignKey, pausedKey, stageKey, stepKey } from './search-attribute-keys.ts';
import { campaignDetails } from './campaign-details.ts';
import { missingPollerReason, withMissingPollerNamed } from './missing-poller.ts';
import { watchingQueues, type WatchedQueue } from './queue-watch.ts';
import { infrastructureCause } from './failure-class.ts';
import { controlAnswer, type ControlAction } from './campaign-control-answers.ts';
import { evaluationSummary, probeSummary as probeStaticSummary, trainingStepSummary, waitInWords } from './ui-text.ts';
import { startLearnerNodes } from './learner-nodes.ts';
import { stepLostFailureType, trainingStepWorkflow, type TrainingStepResult } from './training-step-workflow.ts';
import type { SampledStep } from './sampled-step.ts';
import type { TaskCursor } from '../core/epoch-task-order.ts';
import {
  bookkeepingOptions,
  defaultBookkeepingQueueWaitMs,
  defaultMaxReruns,
  defaultRolloutQueueWaitMs,
  gpuOptions,
  nonFiniteStepsBeforePause,
  outageWaits,
  pausedStageRetryMs,
  policyQuestionOptions,
} from './activity-options.ts';

/**
 * The six-stage loop as one durable workflow: ingest -> probe -> select -> training steps -> evaluation ->
 * report. Each training step is a child workflow `<campaign>/step-<n>`; the campaign continues as new after
 * every step with a compact state, so its history stays small however long it runs. Updates (and, for older
 * clients, signals) pause, resume and stop-after-step; the `status` query answers at any time. A stage that fails
 * for an infrastructure reason pauses the campaign with that reason and runs again on resume or by itself after a
 * capped backoff (`pausingOnInfrastructure`); only bad input and bugs fail it.
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
  /** Why the campaign paused itself (an infrastructure failure, non-finite updates); cleared by resume. */
  pauseReason?: string;
  /** What waits while paused by an infrastructure failure ('the probe', 'training step 3'); unset otherwise. */
  pausedAt?: string;
  /** A lost training step's pause: how long until the step is tried again by itself (unset: until resumed). */
  retryPausedStepInMs?: number;
  stopAfterStep: boolean;
  /** Training steps in a row whose update the learner skipped as non-finite; reset by a finite one or a resume. */
  nonFiniteInARow?: number;
  /** The next step's groups, sampled during the last step's update (`training.max_staleness` > 0). */
  nextSample?: SampledStep;
  /** `training.task_order: epoch`: where the task stream stands, past every task drawn so far. */
  taskCursor?: TaskCursor;
  /** Tasks no later step draws: a group of theirs ended in a task error (their test code raised), with the cause. */
  droppedTasks?: { uid: string; step: number; cause: string }[];
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

export interface CampaignStatus extends Omit<CampaignState, 'pool' | 'nextSample'> {
  campaignId: string;
  poolSize: number;
  steps: number;
}

/** Pause before the next training step; the optional reason shows in `status` and the UI's current details. */
export const pauseSignal = defineSignal<[{ reason?: string }?]>('pause');
export const resumeSignal = defineSignal('resume');
export const stopAfterStepSignal = defineSignal('stopAfterStep');
export const statusQuery = defineQuery<CampaignStatus>('status');
/** The same three as Updates: each answers when it takes effect, or is refused with the reason. */
export const pauseUpdate = defineUpdate<string, [{ reason?: string }]>('pauseCampaign');
export const resumeUpdate = defineUpdate<string>('resumeCampaign');
export const stopAfterStepUpdate = defineUpdate<string>('stopCampaignAfterStep');

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('30 minutes', 10));

/**
 * The campaign's next run. Under Worker Versioning (infra/worker-deployment.ts) each run is pinned to the build
 * it started on, with its children; the next run starts on the deployment's current build: a deploy reaches a
 * campaign at its next step, and no run ever replays on code it did not start with. Unversioned: a plain
 * continue-as-new (the option is ignored).
 */
function continueCampaignAsNew(input: CampaignInput): Promise<never> {
  return makeContinueAsNewFunc<typeof campaignWorkflow>({ initialVersioningBehavior: 'AUTO_UPGRADE' })(input);
}

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
        proxyActivities<GpuActivities>(
          gpuOptions(input.queues.gpu, '10 minutes', input.config.recovery?.gpu_queue_wait_ms),
        ),
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
  /**
   * Set while the campaign is paused on a rollout or bookkeeping queue without a poller (watchedStage): the queue,
   * and the pause it replaced (a pause the user requested), which comes back when the queue has a poller again.
   */
  queueWait?: { queue: string; pausedBefore: boolean; reasonBefore?: string };
  /** Bumped by a resume: every watched queue's wait starts over (queue-watch.ts). */
  watchEpoch: number;
}

async function campaignStages(input: CampaignInput): Promise<CampaignStatus> {
  const state: CampaignState = input.state ?? { stage: 'ingest', step: 0, paused: false, stopAfterStep: false };
  const run: CampaignRun = {
    input,
    state,
    gpu: withMissingPollerNamed(
      proxyActivities<GpuActivities>(gpuOptions(input.queues.gpu, '1 hour', input.config.recovery?.gpu_queue_wait_ms)),
      input.queues.gpu,
    ),
    watchEpoch: 0,
  };
  setCampaignHandlers(run);
  if (!input.state) upsertMemo({ config: input.config });

  if (state.stage === 'ingest') await ingest(run);
  if (state.stage === 'evaluate-before') {
    state.evalBefore = await evaluate(run, 'before');
    state.stage = 'train';
    await continueCampaignAsNew({ ...input, state });
  }
  if (state.stage === 'train') await train(run);
  if (state.stage === 'evaluate-after') {
    await releaseLearnerOutsideTraining(run);
    state.evalAfter = await evaluate(run, 'after');
    state.stage = 'report';
  }
  if (state.stage === 'report' || state.stage === 'stopped') await report(run);
  return campaignStatus(run);
}

function campaignStatus({ input, state }: CampaignRun): CampaignStatus {
  // The sampled-ahead groups are bookkeeping, not status (a list of episode ids).
  const { pool, allTasks: _all, heldOutTasks: _heldOut, nextSample: _next, ...rest } = state;
  return { ...rest, campaignId: input.campaignId, poolSize: pool?.length ?? 0, steps: input.config.training.steps };
}

function setCampaignHandlers(run: CampaignRun): void {
  const { state } = run;
  setHandler(statusQuery, () => campaignStatus(run));
  const pause = (request?: { reason?: string }) => {
    state.paused = true;
    // Paused on a queue without a poller: its reason stays shown; the requested pause outlasts it.
    if (run.queueWait) {
      run.queueWait.pausedBefore = true;
      if (request?.reason) run.queueWait.reasonBefore = request.reason;
    } else if (request?.reason) state.pauseReason = request.reason;
    flagPaused(true);
    showDetails(run);
  };
  const resume = () => {
    if (run.queueWait) {
      // The stage keeps waiting on the queue; the watch gives it another full wait before it pauses again.
      run.queueWait = undefined;
      state.pausedAt = undefined;
      run.waitingPaused = false;
      run.watchEpoch += 1;
    }
    state.paused = false;
    state.pauseReason = undefined;
    state.nonFiniteInARow = undefined;
    flagPaused(false);
    showDetails(run);
  };
  const stop = () => {
    state.stopAfterStep = true;
    showDetails(run);
  };
  setHandler(pauseSignal, pause);
  setHandler(resumeSignal, resume);
  setHandler(stopAfterStepSignal, stop);
  // The Updates apply the same changes and answer when they take effect; a validator refuses what cannot apply.
  const answer = (action: ControlAction) =>
    controlAnswer(action, state, run.input.config.training.steps, run.waitingPaused === true, run.queueWait?.queue);
  const refuse = (action: ControlAction) => () => {
    const answered = answer(action);
    if ('refused' in answered) throw new Error(answered.refused);
  };
  const applied = (action: ControlAction, apply: () => void): string => {
    const answered = answer(action);
    apply();
    return 'answer' in answered ? answered.answer : '';
  };
  setHandler(pauseUpdate, (request) => applied('pause', () => pause(request)), {
    validator: (_request: { reason?: string }) => refuse('pause')(),
  });
  setHandler(resumeUpdate, () => applied('resume', resume), { validator: refuse('resume') });
  setHandler(stopAfterStepUpdate, () => applied('stop', stop), { validator: refuse('stop') });
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
    // Only when set: the activity input of a full fine-tuning campaign stays as recorded histories have it.
    ...loraServing(config.learner),
    ...logprobsServing(config.learner),
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
  const { config } = run.input;
  enter(run, 'ingest');
  const uids = await pausingOnInfrastructure(run, 'the ingest', () => ingestAndStartLearner(run));
  // Configs recorded before probe.enabled existed have no such field: they probed.
  const pool =
    uids === undefined || config.probe.enabled === false
      ? uids
      : await pausingOnInfrastructure(run, 'the probe', () => probeCandidates(run, uids));
  if (pool === undefined) {
    // Stopped while paused there: nothing to train on; the report says what was done.
    run.state.stage = 'stopped';
    return;
  }
  run.state.pool = pool;
  run.state.stage = config.evaluation.before_training ? 'evaluate-before' : 'train';
}

/** The candidates, the learner (every node) and the run manifest; returns the candidate uids. */
async function ingestAndStartLearner(run: CampaignRun): Promise<string[]> {
  const { input, state, gpu } = run;
  const { campaignId, config } = input;
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
  // Started at ingest all the same: a learner that cannot start fails the campaign before hours of probing.
  await releaseLearnerOutsideTraining(run);
  return uids;
}

/**
 * Frees the learner's GPUs while the campaign probes and evaluates (`learner.release_outside_training`); the next
 * training step starts it again from its last checkpoint and times the start. An attached learner stays. Runs
 * recorded before the release existed kept their learner: replay must not see the call.
 */
async function releaseLearnerOutsideTraining({ input, gpu }: CampaignRun): Promise<void> {
  const { learner } = input.config;
  if (learner.release_outside_training === false || learner.attach_url !== undefined) return;
  if (patched('release-learner-outside-training')) await gpu.releaseLearner({ campaignId: input.campaignId });
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
        ...keyedInput(run, withJudgeMode(episode, config.probe.judge_mode), uids, config.probe),
        minCleanRuns: config.probe.min_clean_runs,
        retainBands: config.probe.retain_bands,
        outageWaits: outageWaits(config.recovery, 2),
      },
    ],
  });
  const { pool, ...probeSummary } = probe;
  run.state.probe = probeSummary;
  return pool;
}

/** The evaluation child; undefined when the campaign was stopped while the evaluation waited paused. */
async function evaluate(run: CampaignRun, label: 'before' | 'after'): Promise<EvaluationResult | undefined> {
  const { input, state } = run;
  const { campaignId, config } = input;
  enter(run, `evaluate-${label}`);
  const uids = { pool: state.pool, all: state.allTasks, held_out: state.heldOutTasks }[config.evaluation.tasks]!;
  // A re-run after a pause starts the child again under the same id: its stored episodes are reused.
  return pausingOnInfrastructure(run, `the evaluation ${label} training`, async () => {
    const { episode } = await episodeConfig(run);
    return executeChild(evaluationWorkflow, {
      workflowId: `${campaignId}/eval-${label}`,
      staticSummary: evaluationSummary(`evaluation ${label} training`, uids.length, config.evaluation.repeats),
      typedSearchAttributes: campaignAttributes(campaignId, `evaluate-${label}`, state.step),
      args: [
        {
          ...keyedInput(run, withJudgeMode(episode, config.evaluation.judge_mode), uids, config.evaluation),
          label,
          prices: input.pricesFile,
          taskErrors: config.evaluation.task_errors,
        },
      ],
    });
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
    const outcome = await pausingOnInfrastructure(run, `training step ${step}`, () => trainingStep(run, step));
    if (!outcome) {
      // Stopped while the step waited paused: the report follows with the steps trained so far.
      state.stage = 'stopped';
      return;
    }
    const { record, lost } = outcome;
    if (!record) {
      // Infrastructure, not the campaign, is at fault: pause with the reason visible in `status`; resume retries.
      state.paused = true;
      state.pauseReason = lost;
      // Steps lost before automatic retries existed waited for a resume only; replay keeps them so.
      if (patched('pause-on-infrastructure')) state.retryPausedStepInMs = pausedStageRetryMs(1, input.config.recovery);
      showDetails(run);
      log.warn('campaign paused: a training step lost every group', { campaignId, step, reason: lost });
      return continueCampaignAsNew({ ...input, state });
    }
    state.step = step;
    state.nextSample = record.next;
    state.taskCursor = record.taskCursor ?? state.taskCursor;
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
    dropTasksWithTaskErrors(state, record);
    pauseOnNonFiniteRun(run, record);
    // Signals that arrived during the step are part of `state` and survive the continue-as-new.
    await continueCampaignAsNew({ ...input, state });
  }
  state.stage = state.step < config.training.steps ? 'stopped' : 'evaluate-after';
}

/**
 * A task whose group ended in a task error (its own test code raised the same exception twice) is dropped from the
 * pool for the rest of the campaign: every later group of it would meet the same test. No patch: only records of
 * code that knows task errors carry `taskErrorGroups`, so recorded histories never reach the change.
 */
function dropTasksWithTaskErrors(state: CampaignState, record: StepRecord): void {
  for (const { uid, cause } of record.taskErrorGroups ?? []) {
    if (state.droppedTasks?.some((d) => d.uid === uid)) continue;
    (state.droppedTasks ??= []).push({ uid, step: record.step, cause });
    log.warn('task dropped from training: its test code raised', { uid, step: record.step, cause });
  }
}

/** The pool a step draws from: the selected tasks less the dropped ones. */
function trainingPool(state: CampaignState): string[] {
  const dropped = new Set((state.droppedTasks ?? []).map((d) => d.uid));
  return dropped.size ? state.pool!.filter((uid) => !dropped.has(uid)) : state.pool!;
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
  const retryInMs = state.retryPausedStepInMs;
  if (retryInMs === undefined) await condition(() => !state.paused || state.stopAfterStep);
  else if (!(await condition(() => !state.paused || state.stopAfterStep, retryInMs))) {
    log.info('retrying the lost training step by itself', { campaignId: run.input.campaignId, step: state.step + 1 });
    unpause(run);
  }
  state.retryPausedStepInMs = undefined;
  run.waitingPaused = false;
  showDetails(run);
}

/** Ends a pause the campaign made itself (its retry wait passed), as a resume would. */
function unpause(run: CampaignRun): void {
  run.state.paused = false;
  run.state.pauseReason = undefined;
  flagPaused(false);
}

/**
 * Runs `work` (a stage, or a training step); when it fails for an infrastructure reason (failure-class.ts: an
 * endpoint down past the re-runs, a GPU queue without a poller, a worker gone, a child terminated by hand) the
 * campaign pauses with that reason (status, `TbtPaused`, the UI's details) and runs `work` again on a resume, or by
 * itself after `recovery.paused_stage_retry_ms`, doubling up to `paused_stage_retry_max_ms`. A pause already
 * requested by the user waits for a resume only. Bad input and bugs fail the campaign as before. While `work` runs,
 * the `watched` queues are watched for a missing poller (watchedStage). Returns undefined when the campaign is
 * stopped while `work` waits paused.
 */
async function pausingOnInfrastructure<T>(
  run: CampaignRun,
  what: string,
  work: () => Promise<T>,
  watched: WatchedQueue['role'][] = ['rollout', 'bookkeeping'],
): Promise<T | undefined> {
  const { state, input } = run;
  for (let retry = 1; ; retry++) {
    try {
      const done = await watchedStage(run, what, work, watched);
      if ('value' in done) return done.value;
      // Stopped while paused on a queue without a poller: the stage was cancelled, nothing waits for a resume.
      if (state.paused) unpause(run);
      return undefined;
    } catch (err) {
      const cause = infrastructureCause(err);
      // Histories from before this pause failed here: replay must fail them the same way.
      if (cause === undefined || !patched('pause-on-infrastructure')) throw err;
      const pausedByUser = state.paused;
      const retryInMs = pausedStageRetryMs(retry, input.config.recovery);
      state.paused = true;
      state.pausedAt = what;
      state.pauseReason =
        `${what} failed for an infrastructure reason: ${cause}. ` +
        (pausedByUser
          ? 'It runs again on `tbt campaign resume`'
          : `It runs again by itself in ${waitInWords(retryInMs)}, or now on \`tbt campaign resume\``);
      flagPaused(true);
      run.waitingPaused = true;
      showDetails(run);
      log.warn('campaign paused by an infrastructure failure', { campaignId: input.campaignId, what, cause, retry });
      const resumed = pausedByUser
        ? await condition(() => !state.paused || state.stopAfterStep).then(() => true)
        : await condition(() => !state.paused || state.stopAfterStep, retryInMs);
      if (!resumed) unpause(run);
      state.pausedAt = undefined;
      run.waitingPaused = false;
      showDetails(run);
      if (state.stopAfterStep) {
        if (state.paused) unpause(run);
        return undefined;
      }
    }
  }
}

/**
 * `work` while the rollout and bookkeeping queues are watched (queue-watch.ts). One that lists no poller for its
 * wait (`recovery.rollout_queue_wait_ms`, at least the episode wall clock; `recovery.bookkeeping_queue_wait_ms`)
 * pauses the campaign at `what` with the queue named; `work` is left as it is, its activities still scheduled, so no
 * episode is lost or run twice. The pause ends by itself when the queue has a poller again or `work` ends, or on a
 * resume (the watch then waits a full wait again); a stop while so paused cancels `work`. Runs recorded before the
 * watch replay without its commands.
 */
async function watchedStage<T>(
  run: CampaignRun,
  what: string,
  work: () => Promise<T>,
  watched: WatchedQueue['role'][],
): Promise<{ value: T } | { abandoned: true }> {
  if (!patched('watch-every-queue')) return { value: await work() };
  const { input, state } = run;
  const { recovery, episode } = input.config;
  const queues: Record<WatchedQueue['role'], WatchedQueue> = {
    rollout: {
      role: 'rollout',
      name: input.queues.rollout,
      waitMs: Math.max(recovery?.rollout_queue_wait_ms ?? defaultRolloutQueueWaitMs, episode.limits.wall_clock_ms),
    },
    // Bookkeeping activities take the workflow's own queue (they name none); the looks run there, so it is always
    // watched: nobody taking a look within its wait is its missing poller.
    bookkeeping: {
      role: 'bookkeeping',
      name: workflowInfo().taskQueue,
      waitMs: recovery?.bookkeeping_queue_wait_ms ?? defaultBookkeepingQueueWaitMs,
    },
  };
  try {
    return await watchingQueues(
      {
        lookQueue: queues.bookkeeping,
        asked: watched.filter((role) => role !== 'bookkeeping').map((role) => queues[role]),
        onLook: (missing) => (missing[0] ? pauseOnQueue(run, what, missing[0]) : endQueuePause(run)),
        epoch: () => run.watchEpoch,
        abandon: () => run.queueWait !== undefined && state.stopAfterStep,
      },
      work,
    );
  } finally {
    endQueuePause(run);
  }
}

/** Pauses the campaign at `what`, naming a queue without a poller; a pause requested before is kept aside. */
function pauseOnQueue(run: CampaignRun, what: string, queue: WatchedQueue): void {
  const { state } = run;
  if (run.queueWait?.queue === queue.name) return;
  run.queueWait = run.queueWait
    ? { ...run.queueWait, queue: queue.name }
    : { queue: queue.name, pausedBefore: state.paused, reasonBefore: state.pauseReason };
  state.paused = true;
  state.pausedAt = what;
  state.pauseReason = missingPollerReason(what, queue.name, queue.role, queue.waitMs);
  flagPaused(true);
  run.waitingPaused = true;
  showDetails(run);
  log.warn('campaign paused: a queue has no poller', { campaignId: run.input.campaignId, what, queue: queue.name });
}

/** Ends a pause on a queue without a poller (a poller is back, or the stage ended): the pause before it returns. */
function endQueuePause(run: CampaignRun): void {
  const { state } = run;
  const wait = run.queueWait;
  if (!wait) return;
  run.queueWait = undefined;
  state.paused = wait.pausedBefore;
  state.pauseReason = wait.reasonBefore;
  state.pausedAt = undefined;
  run.waitingPaused = false;
  flagPaused(state.paused);
  showDetails(run);
  log.info('campaign no longer paused on a queue without a poller', {
    campaignId: run.input.campaignId,
    queue: wait.queue,
  });
}

/** The step's child workflow; a step that lost every group to infrastructure errors yields its reason instead. */
async function trainingStep(run: CampaignRun, step: number): Promise<{ record?: TrainingStepResult; lost?: string }> {
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
        pool: trainingPool(state),
        suiteDir: input.suiteDir,
        episode: withJudgeMode(episode, config.training.judge_mode),
        training: config.training,
        learner: config.learner,
        seed: config.seed,
        rolloutQueue: input.queues.rollout,
        gpuQueue: input.queues.gpu,
        ...(input.queues.gpuNodes ? { gpuNodeQueues: input.queues.gpuNodes } : {}),
        policyServers,
        embeddedEngine: config.episode.policy.base_url === 'embedded' ? config.episode.policy.engine : undefined,
        weightVersion: state.weightVersion ?? 0,
        // What a server that lost the version is synced to again (training-step-workflow.ts resyncServedWeights).
        ...(state.weightsPath ? { weightsPath: state.weightsPath } : {}),
        gpuQueueWaitMs: config.recovery?.gpu_queue_wait_ms,
        ...(state.taskCursor ? { taskCursor: state.taskCursor } : {}),
        // Overlapped steps (max_staleness > 0): this step's groups, if sampled ahead, and whether to sample the next.
        ...(config.training.max_staleness > 0
          ? {
              sampled: state.nextSample,
              sampleNext: step < config.training.steps && !state.stopAfterStep,
            }
          : {}),
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
  const { state } = run;
  const stopped = state.stage === 'stopped';
  enter(run, 'report');
  // Stopped while paused, or a pause requested with no training step left: nothing waits for a resume any more.
  if (state.paused) flagPaused(false);
  // Stopped or paused: a later pause here (Postgres or the GPU queue down) waits for the retry or a resume.
  state.paused = false;
  // The report runs no episode: only the bookkeeping queue is watched.
  await pausingOnInfrastructure(run, 'the report', () => writeReportAndRelease(run), ['bookkeeping']);
  enter(run, stopped ? 'stopped' : 'done');
}

/** The costs, the report, and the release of the learner and the embedded policy server. */
async function writeReportAndRelease(run: CampaignRun): Promise<void> {
  const { input, state, gpu } = run;
  const { campaignId, config } = input;
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
}

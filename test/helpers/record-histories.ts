/**
 * Records the workflow histories that test/unit/workflow-replay.test.ts replays, each run on a throw-away dev
 * server with scripted activities (one task flaky, so re-runs and refills appear in the history):
 *
 * - a probe, a training step, an evaluation and a shard of it;
 * - every run of a campaign's continue-as-new chain: `campaign` (ingest, probe, evaluation before),
 *   `campaign-step-1`, `campaign-step-2` (one training step each) and `campaign-report` (evaluation after, report);
 * - campaigns on the other paths: paused by an Update and resumed by one (`campaign-paused`), paused by an
 *   infrastructure failure and retried by itself (`campaign-infra-paused`), stopped before training
 *   (`campaign-stopped`), failed on bad input with its clean-up (`campaign-failed`);
 * - a scheduled evaluation: of an embedded server, of an external one (`scheduled-evaluation-external`), and one
 *   paused by an outage at aggregation and run again by itself (`scheduled-evaluation-paused`);
 * - a training step of a two-node learner;
 * - a training step in the epoch order (`training-step-epoch`: it draws from the campaign's task cursor);
 * - overlapped steps (`max_staleness` 1): a training step and a campaign's chain;
 * - a training step whose learner had trained another batch (`training-step-trained-batch`: the step record reads
 *   the trained episodes back);
 * - an evaluation cut by a small history budget, continuing as new between shards (`evaluation-continued`, then
 *   `evaluation-continued-2`).
 *
 * The campaign's queue watch asks for the queues' pollers (`taskQueuePollers`): answered here with one poller each,
 * so the watch's looks are recorded and no campaign pauses on a queue.
 *
 *   tsx test/helpers/record-histories.ts <out-dir> [workflows-dir]
 *
 * workflows-dir defaults to this checkout's workflows/; pass an older checkout's to record what running workflows
 * of that version hold (kept under a `v<n>/` folder: they prove `patched()` keeps old runs replayable).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { historyToJSON, type History } from '@temporalio/common/lib/proto-utils.js';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { planStage, stageHistoryOwn, stageHistoryPerShard } from '../../workflows/history-budget.ts';
import { startWorkflowTestEnv } from './workflow-test-env.ts';

const [outDir, workflowsDir = path.join(repoRoot, 'workflows')] = process.argv.slice(2);
if (!outDir) throw new Error('usage: record-histories.ts <out-dir> [workflows-dir]');
fs.mkdirSync(outDir, { recursive: true });
const queue = 'record-histories';

/** Campaigns whose ingest fails once for infrastructure (then succeeds), or always on bad input. */
const ingestFailures = { infra: 'rec-infra-paused', badInput: 'rec-failed' };
let infraFailed = false;
/** A scheduled evaluation whose aggregation fails once for infrastructure (it pauses, then runs again). */
const aggregationOutage = 'rec-eval-paused';
let aggregationFailed = false;
/** A training step whose learner answers that it had trained another batch (one episode this run did not draw). */
const trainedBatchCampaign = 'rec-trained-batch';

const activities = {
  async runEpisode(input: EpisodeActivityInput) {
    const rep = input.repetition ?? 0;
    const infra = input.taskUid === 'flaky' && rep === 0 && !input.episodeId.includes('~retry');
    const outcome = infra ? 'infrastructure_error' : rep % 2 === 0 ? 'success' : 'agent_failure';
    return {
      id: input.episodeId,
      outcome,
      reward: outcome === 'success' ? 1 : 0,
      finishReason: 'done',
      policyTokens: 0,
    };
  },
  async aggregateEvaluation(i: { campaignId: string }) {
    if (i.campaignId === aggregationOutage && !aggregationFailed) {
      aggregationFailed = true;
      throw ApplicationFailure.nonRetryable('recorded outage: the control database is down', 'InfrastructureError');
    }
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  selectPool: async () => ({ pool: ['flaky', 'steady'], bands: { medium: 2 }, aggregates: 'aggregates.jsonl' }),
  recordStep: async () => undefined,
  async trainStep(i: { campaignId: string; stepId: number; items: { episodeId: string }[] }) {
    const done = { stepId: i.stepId, repeated: false, checkpoint: 'c', metrics: { loss: 0 } };
    if (i.campaignId !== trainedBatchCampaign) return done;
    // A step trained before (by a run that drew other episodes): one id drawn now, one that this run did not draw.
    const trainedEpisodeIds = [i.items[0]!.episodeId, `${trainedBatchCampaign}/step-${i.stepId}/flaky#0`].sort();
    return { ...done, repeated: true, batchMatches: false, trainedEpisodeIds };
  },
  trainedEpisodes: async (i: { episodeIds: string[] }) =>
    i.episodeIds.map((id) => ({
      id,
      taskUid: id.slice(id.lastIndexOf('/') + 1, id.lastIndexOf('#')),
      reward: 1,
      outcome: 'success',
      weightVersion: 0,
    })),
  exportWeights: async (i: { stepId: number }) => ({ path: `/weights/${i.stepId}` }),
  syncWeights: async () => ({ weightVersion: 1 }),
  async ingestCandidates(i: { campaignId: string }) {
    if (i.campaignId === ingestFailures.badInput)
      throw ApplicationFailure.nonRetryable('recorded bad input: the suite has no tasks', 'BadInputError');
    if (i.campaignId === ingestFailures.infra && !infraFailed) {
      infraFailed = true;
      throw ApplicationFailure.nonRetryable('recorded outage: the control database is down', 'InfrastructureError');
    }
    return { uids: ['flaky', 'steady'], excluded: 0, evaluationUids: ['flaky', 'steady'], heldOutUids: [] };
  },
  startLearner: async () => ({ controlUrl: 'http://learner', manifest: {} }),
  startLearnerNode: async (i: { nodeRank: number }) => ({
    nodeRank: i.nodeRank,
    pid: 1000 + i.nodeRank,
    started: true,
  }),
  writeManifest: async () => '/manifest.json',
  ensurePolicyServer: async () => ({ baseUrl: 'http://policy/v1', model: 'm' }),
  ensurePolicyWeights: async () => undefined,
  policySystemMessages: async () => ({ system_messages: 'separate' }),
  stopLearner: async () => undefined,
  releaseLearner: async () => ({ released: true }),
  campaignCosts: async () => '/costs.json',
  writeReport: async () => ({ html: '/r/index.html', markdown: '/r/summary.md' }),
  latestCheckpoint: async () => ({ step: 2, exportPath: '/weights/2', pool: ['flaky', 'steady'] }),
  // No campaign trains on the external server a scheduled evaluation evaluates.
  campaignTrainingOn: async () => [],
  // The queue watch's look (activities/queue-watch-activities.ts): every queue has a poller.
  taskQueuePollers: async (i: { queues: string[] }) => i.queues.map(() => 1),
};

const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
const episode = config.episode;
const keyed = { uids: ['flaky', 'steady'], repeats: 2, suiteDir: '/suite', episode, rolloutQueue: queue, maxReruns: 2 };
const stepInput = {
  campaignId: 'rec',
  step: 1,
  pool: ['flaky', 'steady'],
  suiteDir: '/suite',
  episode,
  training: { ...config.training, groups_per_step: 2, group_size: 2, concurrency: 2, task_order: 'seeded' as const },
  learner: config.learner,
  seed: 1,
  rolloutQueue: queue,
  gpuQueue: queue,
  policyServers: ['http://policy/v1'],
  weightVersion: 0,
  infraBackoff: { initialMs: 10, maxMs: 10 },
};
/** Step 1's groups as step 0 would have sampled them ahead, for the overlapped step's recording. */
const sampledAhead = {
  step: 1,
  startVersion: 0,
  trainVersion: 0,
  seconds: 1,
  groups: [
    {
      uid: 'steady',
      episodes: [
        { id: 'rec/step-1/steady#0', reward: 1, outcome: 'success', weightVersion: 0 },
        { id: 'rec/step-1/steady#1', reward: 0, outcome: 'agent_failure', weightVersion: 0 },
      ],
    },
  ],
  informativeGroups: 1,
  zeroVarianceGroups: 0,
  replacements: 0,
  lostGroups: 0,
  infraErrors: 0,
  staleEpisodes: 0,
  fallback: null,
};
/** Two training steps, small shards; `retry` quick, so a stage paused by an outage runs again within a second. */
const campaignConfig = {
  ...config,
  training: { ...config.training, steps: 2 },
  probe: { ...config.probe, shard_size: 3 },
  evaluation: { ...config.evaluation, shard_size: 3 },
  recovery: { ...config.recovery, paused_stage_retry_ms: 1000, paused_stage_retry_max_ms: 1000 },
};
/** The other campaign paths: no probe or evaluation before training, so each path is one short run. */
const shortConfig = {
  ...campaignConfig,
  probe: { ...campaignConfig.probe, enabled: false },
  evaluation: { ...campaignConfig.evaluation, before_training: false },
};
/**
 * An evaluation of 4 keys in shards of 1 whose history budget lets one run of it start 2 shards: it continues as new
 * once, between shards (the plan, computed as the workflow computes it, is checked before it is recorded).
 */
const continuedEvaluation = (() => {
  const input = { ...keyed, campaignId: 'rec-continued', concurrency: 2, shardSize: 1, label: 'x' };
  const shape = {
    keys: input.uids.length * input.repeats,
    concurrency: input.concurrency,
    maxReruns: input.maxReruns,
    outageWaits: 0,
    shardSize: input.shardSize,
    episodeBytes: JSON.stringify(input.episode).length,
    inputBytes: JSON.stringify(input).length,
  };
  const events = stageHistoryOwn(shape).events + 2 * stageHistoryPerShard(shape, 1).events + 1;
  const historyBudget = { events, bytes: 10 * 1024 * 1024 };
  const plan = planStage({ ...shape, budget: historyBudget });
  if (plan.shardSize !== 1 || plan.shardStartsPerRun !== 2 || plan.runs !== 2)
    throw new Error(`the continued evaluation's plan is not 2 runs of 2 shards: ${JSON.stringify(plan)}`);
  return { ...input, historyBudget };
})();
function scheduledEvaluationInput(campaignId: string, campaign = campaignConfig) {
  return { campaignId, config: campaign, suiteDir: '/suite', queues: { rollout: queue, gpu: queue }, repeats: 2 };
}
function campaignInput(campaignId: string, campaign = shortConfig) {
  return {
    campaignId,
    config: campaign,
    suiteDir: '/suite',
    pricesFile: '/prices.yaml',
    queues: { rollout: queue, gpu: queue },
  };
}

interface Recording {
  /** File names of the runs of the chain, in order; the first run's name is the recording's. */
  files: string[];
  type: string;
  workflowId: string;
  args: unknown[];
  /** What is done to the workflow while it runs (Updates, waits). */
  drive?: (handle: WorkflowHandle) => Promise<void>;
  /** The workflow is meant to fail (its failure is part of the history). */
  fails?: boolean;
}

interface CampaignStatusView {
  stage: string;
  paused: boolean;
}

/** Polls the campaign's status query until `ready` holds (at most a minute). */
async function waitForStatus(handle: WorkflowHandle, ready: (s: CampaignStatusView) => boolean): Promise<void> {
  for (let tries = 0; tries < 600; tries++) {
    if (ready(await handle.query<CampaignStatusView>('status'))) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${handle.workflowId}: the status never became what the recording waits for`);
}

const recordings: Recording[] = [
  {
    files: ['evaluation'],
    type: 'evaluationWorkflow',
    workflowId: 'record-evaluation',
    args: [{ ...keyed, campaignId: 'rec', concurrency: 2, shardSize: 3, label: 'x' }],
  },
  {
    files: ['probe'],
    type: 'probeWorkflow',
    workflowId: 'record-probe',
    args: [{ ...keyed, campaignId: 'rec', concurrency: 2, shardSize: 3, minCleanRuns: 1, retainBands: ['medium'] }],
  },
  {
    // Continues as new between shards, under a small history budget (the history-budget plan).
    files: ['evaluation-continued', 'evaluation-continued-2'],
    type: 'evaluationWorkflow',
    workflowId: 'record-evaluation-continued',
    args: [continuedEvaluation],
  },
  { files: ['training-step'], type: 'trainingStepWorkflow', workflowId: 'record-training-step', args: [stepInput] },
  {
    // The epoch order (the default since task_order existed): the step draws the stream's next tasks from a cursor.
    files: ['training-step-epoch'],
    type: 'trainingStepWorkflow',
    workflowId: 'record-training-step-epoch',
    args: [
      {
        ...stepInput,
        step: 2,
        pool: ['flaky', 'steady', 'spare'],
        training: { ...stepInput.training, task_order: 'epoch' },
        taskCursor: { epoch: 1, last: 'steady' },
      },
    ],
  },
  {
    // The learner had trained another batch: the record names it, reading the episode it lacks from the store.
    files: ['training-step-trained-batch'],
    type: 'trainingStepWorkflow',
    workflowId: 'record-training-step-trained-batch',
    args: [{ ...stepInput, campaignId: trainedBatchCampaign }],
  },
  {
    files: ['training-step-multi-node'],
    type: 'trainingStepWorkflow',
    workflowId: 'record-training-step-multi-node',
    args: [{ ...stepInput, learner: { ...config.learner, nodes: 2 }, gpuNodeQueues: [queue, queue] }],
  },
  {
    // Overlapped (max_staleness 1): trains on groups sampled ahead while it samples step 2's.
    files: ['training-step-overlapped'],
    type: 'trainingStepWorkflow',
    workflowId: 'record-training-step-overlapped',
    args: [
      {
        ...stepInput,
        training: { ...stepInput.training, max_staleness: 1 },
        sampled: sampledAhead,
        sampleNext: true,
      },
    ],
  },
  {
    files: ['campaign-overlapped', 'campaign-overlapped-step-2', 'campaign-overlapped-report'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign-overlapped',
    args: [
      campaignInput('rec-overlapped', {
        ...shortConfig,
        training: { ...shortConfig.training, max_staleness: 1 },
        learner: { ...shortConfig.learner, is_cap: 2 },
      }),
    ],
  },
  {
    files: ['campaign', 'campaign-step-1', 'campaign-step-2', 'campaign-report'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign',
    args: [campaignInput('rec-campaign', campaignConfig)],
  },
  {
    // Paused by an Update during ingest, waits before step 1, resumed by an Update; step 2 and the rest follow.
    files: ['campaign-paused', 'campaign-paused-step-2', 'campaign-paused-report'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign-paused',
    args: [campaignInput('rec-paused')],
    async drive(handle) {
      await handle.executeUpdate('pauseCampaign', { args: [{ reason: 'recorded pause' }] });
      await waitForStatus(handle, (s) => s.stage === 'train' && s.paused);
      await handle.executeUpdate('resumeCampaign');
    },
  },
  {
    files: ['campaign-infra-paused', 'campaign-infra-paused-step-2', 'campaign-infra-paused-report'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign-infra-paused',
    args: [campaignInput(ingestFailures.infra)],
  },
  {
    files: ['campaign-stopped'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign-stopped',
    args: [campaignInput('rec-stopped')],
    async drive(handle) {
      await handle.executeUpdate('stopCampaignAfterStep');
    },
  },
  {
    files: ['campaign-failed'],
    type: 'campaignWorkflow',
    workflowId: 'record-campaign-failed',
    args: [campaignInput(ingestFailures.badInput)],
    fails: true,
  },
  {
    files: ['scheduled-evaluation'],
    type: 'scheduledEvaluationWorkflow',
    workflowId: 'record-scheduled-evaluation',
    args: [scheduledEvaluationInput('rec-campaign')],
  },
  {
    // An external policy server: synced to the checkpoint, nothing started or stopped.
    files: ['scheduled-evaluation-external'],
    type: 'scheduledEvaluationWorkflow',
    workflowId: 'record-scheduled-evaluation-external',
    args: [
      scheduledEvaluationInput('rec-campaign', {
        ...campaignConfig,
        episode: { ...episode, policy: { ...episode.policy, base_url: 'http://x/v1' } },
      }),
    ],
  },
  {
    // Its aggregation fails once for infrastructure: the evaluation pauses and runs again by itself (1 s later).
    files: ['scheduled-evaluation-paused'],
    type: 'scheduledEvaluationWorkflow',
    workflowId: 'record-scheduled-evaluation-paused',
    args: [scheduledEvaluationInput(aggregationOutage)],
  },
];

/** Every run of a workflow's continue-as-new chain, first run first. */
async function chainHistories(env: TestWorkflowEnvironment, workflowId: string, firstRunId: string) {
  const histories: History[] = [];
  for (let runId: string | undefined = firstRunId; runId;) {
    const history = await env.client.workflow.getHandle(workflowId, runId).fetchHistory();
    histories.push(history);
    const last = history.events?.at(-1);
    runId = last?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
  }
  return histories;
}

async function record(env: TestWorkflowEnvironment, r: Recording): Promise<void> {
  const handle = await env.client.workflow.start(r.type, { taskQueue: queue, workflowId: r.workflowId, args: r.args });
  await r.drive?.(handle);
  const ended = await handle.result().then(
    () => undefined,
    (err: unknown) => err,
  );
  if (Boolean(ended) !== Boolean(r.fails)) throw new Error(`${r.workflowId}: ended unexpectedly`, { cause: ended });
  const histories = await chainHistories(env, r.workflowId, handle.firstExecutionRunId);
  if (histories.length !== r.files.length)
    throw new Error(`${r.workflowId}: ${histories.length} runs in its chain, expected ${r.files.length}`);
  histories.forEach((history, i) => {
    const file = path.join(outDir!, `${r.files[i]}.json`);
    fs.writeFileSync(file, `${historyToJSON(history)}\n`);
    console.log(`${file}: ${history.events?.length} events`);
  });
}

const env = await startWorkflowTestEnv();
// The dev server is stopped also when a recording fails (else it outlives the script).
try {
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: queue,
    workflowBundle: await bundleWorkflowCode({ workflowsPath: path.join(workflowsDir, 'index.ts') }),
    activities,
  });
  await worker.runUntil(async () => {
    for (const r of recordings) await record(env, r);
    // A shard of the sharded runner (absent in versions before it).
    const shard = await env.client.workflow
      .getHandle('rec/eval-x/shard-0')
      .fetchHistory()
      .catch(() => undefined);
    if (shard) fs.writeFileSync(path.join(outDir, 'evaluation-shard.json'), `${historyToJSON(shard)}\n`);
  });
} finally {
  await env.teardown();
}

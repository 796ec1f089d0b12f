/**
 * Records the workflow histories that test/unit/workflow-replay.test.ts replays: a campaign (probe, evaluation
 * before, one training step, evaluation after, report), a probe, a training step and an evaluation, each run on a
 * throw-away dev server with scripted activities (one task flaky, so re-runs and refills appear in the history).
 *
 *   tsx test/helpers/record-histories.ts <out-dir> [workflows-dir]
 *
 * workflows-dir defaults to this checkout's workflows/; pass an older checkout's to record what running workflows
 * of that version hold (fixtures named `*-v<n>.json` are kept: they prove `patched()` keeps old runs replayable).
 */
import fs from 'node:fs';
import path from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { startWorkflowTestEnv } from './workflow-test-env.ts';

const [outDir, workflowsDir = path.join(repoRoot, 'workflows')] = process.argv.slice(2);
if (!outDir) throw new Error('usage: record-histories.ts <out-dir> [workflows-dir]');
fs.mkdirSync(outDir, { recursive: true });
const queue = 'record-histories';

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
  aggregateEvaluation: async () => ({ aggregate: 'eval.json', summary: 'ok' }),
  selectPool: async () => ({ pool: ['flaky', 'steady'], bands: { medium: 2 }, aggregates: 'aggregates.jsonl' }),
  recordStep: async () => undefined,
  trainStep: async (i: { stepId: number }) => ({
    stepId: i.stepId,
    repeated: false,
    checkpoint: 'c',
    metrics: { loss: 0 },
  }),
  exportWeights: async (i: { stepId: number }) => ({ path: `/weights/${i.stepId}` }),
  syncWeights: async () => ({ weightVersion: 1 }),
  ingestCandidates: async () => ({
    uids: ['flaky', 'steady'],
    excluded: 0,
    evaluationUids: ['flaky', 'steady'],
    heldOutUids: [],
  }),
  startLearner: async () => ({ controlUrl: 'http://learner', manifest: {} }),
  writeManifest: async () => '/manifest.json',
  ensurePolicyServer: async () => ({ baseUrl: 'http://policy/v1', model: 'm' }),
  stopLearner: async () => undefined,
  campaignCosts: async () => '/costs.json',
  writeReport: async () => ({ html: '/r/index.html', markdown: '/r/summary.md' }),
};

const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
const episode = config.episode;
const keyed = { uids: ['flaky', 'steady'], repeats: 2, suiteDir: '/suite', episode, rolloutQueue: queue, maxReruns: 2 };
const runs: { name: string; type: string; args: unknown[] }[] = [
  {
    name: 'evaluation',
    type: 'evaluationWorkflow',
    args: [{ ...keyed, campaignId: 'rec', concurrency: 2, shardSize: 3, label: 'x' }],
  },
  {
    name: 'probe',
    type: 'probeWorkflow',
    args: [{ ...keyed, campaignId: 'rec', concurrency: 2, shardSize: 3, minCleanRuns: 1, retainBands: ['medium'] }],
  },
  {
    name: 'training-step',
    type: 'trainingStepWorkflow',
    args: [
      {
        campaignId: 'rec',
        step: 1,
        pool: ['flaky', 'steady'],
        suiteDir: '/suite',
        episode,
        training: { ...config.training, groups_per_step: 2, group_size: 2, concurrency: 2 },
        learner: config.learner,
        seed: 1,
        rolloutQueue: queue,
        gpuQueue: queue,
        policyServers: ['http://policy/v1'],
        weightVersion: 0,
        infraBackoff: { initialMs: 10, maxMs: 10 },
      },
    ],
  },
  {
    name: 'campaign',
    type: 'campaignWorkflow',
    args: [
      {
        campaignId: 'rec-campaign',
        config: {
          ...config,
          training: { ...config.training, steps: 1 },
          probe: { ...config.probe, shard_size: 3 },
          evaluation: { ...config.evaluation, shard_size: 3 },
        },
        suiteDir: '/suite',
        pricesFile: '/prices.yaml',
        queues: { rollout: queue, gpu: queue },
      },
    ],
  },
];

const env = await startWorkflowTestEnv();
const worker = await Worker.create({
  connection: env.nativeConnection,
  taskQueue: queue,
  workflowBundle: await bundleWorkflowCode({ workflowsPath: path.join(workflowsDir, 'index.ts') }),
  activities,
});
await worker.runUntil(async () => {
  for (const run of runs) {
    const workflowId = `record-${run.name}`;
    const handle = await env.client.workflow.start(run.type, { taskQueue: queue, workflowId, args: run.args });
    await handle.result();
    // A campaign continues as new after each stage: record its first run, which holds probe and evaluation.
    const history = await env.client.workflow.getHandle(workflowId, handle.firstExecutionRunId).fetchHistory();
    const file = path.join(outDir, `${run.name}.json`);
    fs.writeFileSync(file, `${historyToJSON(history)}\n`);
    console.log(`${file}: ${history.events?.length} events`);
  }
  // A shard of the sharded runner (absent in versions before it).
  const shard = await env.client.workflow
    .getHandle('rec/eval-x/shard-0')
    .fetchHistory()
    .catch(() => undefined);
  if (shard) fs.writeFileSync(path.join(outDir, 'evaluation-shard.json'), `${historyToJSON(shard)}\n`);
});
await env.teardown();

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import type { StepRecord } from '../../activities/campaign-activities.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { epochTaskOrder, epochTaskWindow, firstTaskCursor, type TaskCursor } from '../../core/epoch-task-order.ts';
import { stepTaskOrder } from '../../core/seeded-choice.ts';
import { campaignWorkflow } from '../../workflows/campaign-workflow.ts';
import { trainingStepWorkflow, type TrainingStepInput } from '../../workflows/training-step-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * The epoch order in the workflows (`training.task_order: epoch`, the default): a campaign's steps walk one seeded
 * shuffle of the pool per epoch, the cursor carried from step to step through continue-as-new (synchronous and
 * overlapped steps alike), and a zero-variance group's replacement is the stream's next task.
 */

const queue = 'unit-epoch-steps';

/** Per campaign id: the tasks that fail every episode (zero variance), the episodes run, the manifest written. */
interface Trace {
  zero: Set<string>;
  runs: { step: number; uid: string }[];
  records: StepRecord[];
  manifest?: Record<string, unknown>;
}
const traces = new Map<string, Trace>();
const trace = (campaignId: string, zero: string[] = []): Trace => {
  const t: Trace = { zero: new Set(zero), runs: [], records: [] };
  traces.set(campaignId, t);
  return t;
};

const pool = ['inv/count-1', 'inv/count-2', 'lib/lend-1', 'lib/lend-2', 'park/pay-1'];

const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const t = traces.get(input.campaign!)!;
    t.runs.push({ step: input.step!, uid: input.taskUid });
    const rep = input.repetition ?? 0;
    const success = !t.zero.has(input.taskUid) && rep % 2 === 0;
    return {
      id: input.episodeId,
      outcome: success ? 'success' : 'agent_failure',
      reward: success ? 1 : 0,
      finishReason: 'done',
      policyTokens: 0,
      weightVersion: input.config.policy.weight_version,
    };
  },
  async trainStep(input: { stepId: number }) {
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { stepId: number }) {
    return { path: `/weights/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [{ baseUrl: 'http://policy/v1', seconds: 0 }] };
  },
  async recordStep(record: StepRecord) {
    traces.get(record.campaignId)!.records.push(record);
  },
  async ingestCandidates() {
    return { uids: pool, excluded: 0, evaluationUids: pool };
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async releaseLearner() {
    return { released: true };
  },
  async writeManifest(input: { campaignId: string; manifest: Record<string, unknown> }) {
    traces.get(input.campaignId)!.manifest = input.manifest;
    return `/manifest/${input.campaignId}.json`;
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages() {
    return { system_messages: 'separate' };
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  async stopLearner() {},
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
};

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<unknown>;
before(async () => {
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  running = worker.run();
});
after(async () => {
  worker?.shutdown();
  await running;
  await env?.teardown();
});

/** What the steps should draw: the front of each step's window, `counts[i]` tasks in step i. */
function expectedSteps(seed: number, counts: number[], size: number): string[][] {
  let cursor: TaskCursor = firstTaskCursor;
  return counts.map((count) => {
    const window = epochTaskWindow(pool, seed, cursor, size);
    cursor = window.cursors[count - 1]!;
    return window.uids.slice(0, count);
  });
}

/** The tasks each step ran, in order of first run, sorted within the step (its groups run at once). */
function drawnBySteps(t: Trace, steps: number): string[][] {
  return Array.from({ length: steps }, (_, i) => [
    ...new Set(t.runs.filter((r) => r.step === i + 1).map((r) => r.uid)),
  ]);
}
const sorted = (lists: string[][]) => lists.map((l) => [...l].sort());

async function runCampaign(id: string, training: Partial<CampaignConfig['training']>) {
  const base = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const config: CampaignConfig = {
    ...base,
    probe: { ...base.probe, enabled: false },
    evaluation: { ...base.evaluation, before_training: false, repeats: 1, concurrency: 2 },
    training: { ...base.training, steps: 4, groups_per_step: 2, max_replacements: 0, group_size: 2, ...training },
    learner: { ...base.learner, is_cap: 2 },
  };
  const t = trace(id);
  const status = await env.client.workflow.execute(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ campaignId: id, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
  return { t, status, config };
}

test('campaign: by default the steps walk one shuffle of the pool per epoch, on into the next epoch', async () => {
  const { t, status, config } = await runCampaign('epoch-campaign', {});
  assert.equal(config.training.task_order, 'epoch', 'the default, as the reference');
  assert.equal((t.manifest!.config as CampaignConfig).training.task_order, 'epoch', 'the manifest records it');
  assert.equal(status.step, 4);
  const drawn = drawnBySteps(t, 4);
  // 4 steps x 2 groups over 5 tasks: epoch 1 is the first 5 draws, each task once; step 3 crosses into epoch 2.
  assert.deepEqual(
    [...drawn.slice(0, 2).flat(), drawn[2]!.find((uid) => !drawn.slice(0, 2).flat().includes(uid))].sort(),
    [...pool].sort(),
  );
  assert.deepEqual(sorted(drawn), sorted(expectedSteps(config.seed, [2, 2, 2, 2], 2)));
  assert.deepEqual(status.taskCursor, expectedCursor(config.seed, [2, 2, 2, 2], 2));
  // The per-step order this replaces draws each step afresh: it would repeat a task within the first epoch.
  const perStep = [1, 2, 3].flatMap((step) => stepTaskOrder(pool, config.seed, step).slice(0, 2)).slice(0, 5);
  assert.ok(new Set(perStep).size < 5, 'precondition: the per-step order repeats a task within 5 draws');
});

test('campaign with overlapped steps: the step sampled ahead takes the next tasks of the stream', async () => {
  const { t, status, config } = await runCampaign('epoch-overlapped', { max_staleness: 1 });
  assert.equal(status.step, 4);
  assert.deepEqual(sorted(drawnBySteps(t, 4)), sorted(expectedSteps(config.seed, [2, 2, 2, 2], 2)));
  assert.equal(t.runs.filter((r) => r.step === 5).length, 0, 'no step past the last is sampled');
});

test("step: a zero-variance group's replacement is the stream's next task; the cursor moves past it", async () => {
  const seed = 11;
  const from: TaskCursor = { epoch: 1, last: epochTaskOrder(pool, seed, 1)[1] };
  const window = epochTaskWindow(pool, seed, from, 3);
  const id = 'epoch-replacement';
  const t = trace(id, [window.uids[0]!]);
  const input: TrainingStepInput = {
    campaignId: id,
    step: 2,
    pool,
    suiteDir: '/suite',
    episode: {
      limits: { wall_clock_ms: 60_000 },
      policy: { sync_deadline_ms: 10_000 },
      sampling: { temperature: 1 },
    } as never,
    training: {
      steps: 3,
      groups_per_step: 2,
      group_size: 2,
      concurrency: 4,
      normalize_std: true,
      infra_refill_cap: 0,
      max_replacements: 1,
      max_staleness: 0,
      task_order: 'epoch',
      judge_mode: 'motivation',
      zero_variance_fallback: 'train_on_fewer',
    },
    learner: {} as never,
    policyServers: [],
    weightVersion: 1,
    seed,
    rolloutQueue: queue,
    gpuQueue: queue,
    taskCursor: from,
  };
  const result = await env.client.workflow.execute(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId: `${id}/step-2`,
    args: [input],
  });
  assert.deepEqual(drawnBySteps(t, 2)[1]!.sort(), [...window.uids].sort(), 'the 2 next tasks, then the third');
  assert.deepEqual(result.groups.map((g) => g.uid).sort(), window.uids.slice(1).sort());
  assert.equal(result.replacements, 1);
  assert.deepEqual(result.taskCursor, window.cursors[2]);
});

/** The cursor after the steps of `expectedSteps`. */
function expectedCursor(seed: number, counts: number[], size: number): TaskCursor {
  let cursor: TaskCursor = firstTaskCursor;
  for (const count of counts) cursor = epochTaskWindow(pool, seed, cursor, size).cursors[count - 1]!;
  return cursor;
}

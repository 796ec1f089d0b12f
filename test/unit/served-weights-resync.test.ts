import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import type { CampaignConfig } from '../../config/campaign-config.ts';
import { SERVED_WEIGHTS_MISMATCH } from '../../core/served-weights-cause.ts';
import { trainingStepWorkflow, type TrainingStepInput } from '../../workflows/training-step-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * A training episode that a policy server sampled with other weights than the campaign's (its cause starts with
 * SERVED_WEIGHTS_MISMATCH) makes the step sync the campaign's servers again before it refills the episode
 * (training-step-workflow.ts resyncServedWeights): the embedded server through ensurePolicyServer, whose address the
 * later episodes take, external ones through ensurePolicyWeights; once for episodes that meet it together, and never
 * for another infrastructure cause. Real workflow code on a Temporal dev server, mocked activities.
 */

const queue = 'unit-served-weights-resync';
const resyncMs = 300;

interface Span {
  start: number;
  end: number;
}
interface EpisodeRun extends Span {
  rep: number;
  baseUrl: string;
  model: string;
  failed: boolean;
}
/** Per campaign id: which reps fail and with what cause, and what ran when. */
interface Trace {
  causes: Map<number, string>;
  runs: EpisodeRun[];
  servers: (Span & { input: Record<string, unknown> })[];
  weights: (Span & { input: Record<string, unknown> })[];
}
const traces = new Map<string, Trace>();
const trace = (campaignId: string, causes: Map<number, string>): Trace => {
  const t: Trace = { causes, runs: [], servers: [], weights: [] };
  traces.set(campaignId, t);
  return t;
};

const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const t = traces.get(input.campaign!)!;
    const start = Date.now();
    await delay(50);
    const rep = input.repetition ?? 0;
    const cause = t.causes.get(rep);
    const { base_url: baseUrl, model } = input.config.policy;
    t.runs.push({ rep, baseUrl, model, failed: cause !== undefined, start, end: Date.now() });
    if (cause !== undefined)
      return {
        id: input.episodeId,
        outcome: 'infrastructure_error',
        reward: 0,
        finishReason: 'infrastructure_error',
        cause,
        policyTokens: 0,
      };
    return {
      id: input.episodeId,
      outcome: rep % 2 === 0 ? 'success' : 'agent_failure',
      reward: rep % 2 === 0 ? 1 : 0,
      finishReason: 'done',
      policyTokens: 0,
    };
  },
  async ensurePolicyServer(input: Record<string, unknown> & { campaignId: string }) {
    const start = Date.now();
    await delay(resyncMs);
    traces.get(input.campaignId)!.servers.push({ input, start, end: Date.now() });
    return { baseUrl: 'http://moved/v1', model: 'moved-model' };
  },
  async ensurePolicyWeights(input: Record<string, unknown> & { campaignId: string }) {
    const start = Date.now();
    await delay(resyncMs);
    traces.get(input.campaignId)!.weights.push({ input, start, end: Date.now() });
  },
  async trainStep(input: { stepId: number }) {
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { stepId: number }) {
    return { path: `/weights/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number; servers: string[] }) {
    return { weightVersion: input.weightVersion, servers: input.servers.map((baseUrl) => ({ baseUrl, seconds: 0 })) };
  },
  async recordStep() {},
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

const training: CampaignConfig['training'] = {
  steps: 3,
  groups_per_step: 1,
  group_size: 4,
  concurrency: 4,
  normalize_std: true,
  infra_refill_cap: 2,
  max_replacements: 0,
  max_staleness: 0,
  task_order: 'seeded',
  zero_variance_fallback: 'train_on_fewer',
  judge_mode: 'motivation',
};

/** Step 2 of a campaign whose servers hold version 1 (/weights/1); reps 0 and 1 fail together with `cause`. */
async function runStep(campaignId: string, cause: string, servers: Partial<TrainingStepInput>) {
  const t = trace(
    campaignId,
    new Map([
      [0, `${cause}: first`],
      [1, `${cause}: second`],
    ]),
  );
  const baseUrl = servers.policyServers![0]!;
  const input: TrainingStepInput = {
    campaignId,
    step: 2,
    pool: ['t1'],
    suiteDir: '/suite',
    episode: {
      limits: { wall_clock_ms: 60_000 },
      policy: { base_url: baseUrl, model: 'm', sync_deadline_ms: 10_000, weight_version: 1 },
      sampling: { temperature: 1 },
    } as never,
    training,
    learner: { model_path: '/base-model' } as never,
    policyServers: [],
    weightVersion: 1,
    weightsPath: '/weights/1',
    seed: 7,
    rolloutQueue: queue,
    gpuQueue: queue,
    infraBackoff: { initialMs: 10, maxMs: 20 },
    ...servers,
  };
  const result = await env.client.workflow.execute(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId: `${campaignId}/step-2`,
    args: [input],
  });
  const trained = result.groups[0]!.episodeIds.map((e) => e.slice(e.indexOf('#')));
  return { t, result, trained };
}

const mismatch = `${SERVED_WEIGHTS_MISMATCH}: policy server http://old/v1 sampled with c@0, not c@1`;

test('embedded server: two episodes on other weights re-sync it once; the refills use its new address', async () => {
  const { t, result, trained } = await runStep('resync-embedded', mismatch, {
    policyServers: ['http://old/v1'],
    embeddedEngine: 'vllm',
  });
  assert.equal(t.servers.length, 1, 'one re-sync for both episodes');
  assert.equal(t.weights.length, 0, 'no external sync for the embedded server');
  assert.deepEqual(
    { ...t.servers[0]!.input, deadlineMs: undefined },
    {
      campaignId: 'resync-embedded',
      weightVersion: 1,
      weightsPath: '/weights/1',
      basePath: '/base-model',
      deadlineMs: undefined,
      engine: 'vllm',
    },
  );
  const resync = t.servers[0]!;
  const failed = t.runs.filter((r) => r.failed);
  assert.equal(failed.length, 2);
  assert.ok(
    failed.every((r) => r.end <= resync.end),
    'both mismatches came back while the re-sync ran: they share it',
  );
  const refills = t.runs.filter((r) => r.rep >= training.group_size);
  assert.deepEqual(refills.map((r) => r.rep).sort(), [4, 5]);
  for (const r of refills) {
    assert.ok(r.start >= resync.end, `refill #${r.rep} started after the re-sync`);
    assert.deepEqual([r.baseUrl, r.model], ['http://moved/v1', 'moved-model'], `refill #${r.rep} on the new server`);
  }
  assert.ok(
    t.runs.filter((r) => r.rep < training.group_size).every((r) => r.baseUrl === 'http://old/v1'),
    'the first round ran on the old address',
  );
  assert.equal(result.infraErrors, 2);
  assert.deepEqual(trained, ['#2', '#3', '#4', '#5']);
});

test('external servers: two episodes on other weights sync every server once before the refills', async () => {
  const servers = ['http://a/v1', 'http://b/v1'];
  const { t, result, trained } = await runStep('resync-external', mismatch, { policyServers: servers });
  assert.equal(t.weights.length, 1, 'one re-sync for both episodes');
  assert.equal(t.servers.length, 0, 'no embedded server is started for external ones');
  assert.deepEqual(
    { ...t.weights[0]!.input, deadlineMs: undefined },
    {
      campaignId: 'resync-external',
      weightVersion: 1,
      weightsPath: '/weights/1',
      basePath: '/base-model',
      deadlineMs: undefined,
      servers,
    },
  );
  const resync = t.weights[0]!;
  const refills = t.runs.filter((r) => r.rep >= training.group_size);
  assert.equal(refills.length, 2);
  for (const r of refills) {
    assert.ok(r.start >= resync.end, `refill #${r.rep} started after the re-sync`);
    assert.equal(r.baseUrl, 'http://a/v1', 'external servers keep their address');
  }
  assert.equal(result.infraErrors, 2);
  assert.deepEqual(trained, ['#2', '#3', '#4', '#5']);
});

test('another infrastructure cause: refilled without any re-sync', async () => {
  const { t, result, trained } = await runStep('resync-other-cause', 'policy server unreachable', {
    policyServers: ['http://old/v1'],
    embeddedEngine: 'vllm',
  });
  assert.equal(t.servers.length + t.weights.length, 0, 'no server synced again');
  assert.ok(
    t.runs.filter((r) => r.rep >= training.group_size).every((r) => r.baseUrl === 'http://old/v1'),
    'the refills run on the same server',
  );
  assert.equal(result.infraErrors, 2);
  assert.deepEqual(trained, ['#2', '#3', '#4', '#5']);
});

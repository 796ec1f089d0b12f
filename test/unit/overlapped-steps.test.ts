import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import type { StepRecord } from '../../activities/campaign-activities.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { campaignWorkflow } from '../../workflows/campaign-workflow.ts';
import { episodeLag, type SampledStep } from '../../workflows/sampled-step.ts';
import { trainingStepWorkflow, type TrainingStepInput } from '../../workflows/training-step-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * Overlapped training steps (`training.max_staleness` > 0) on a real Temporal dev server with mocked activities:
 * the next step samples while this one updates, the weight sync waits until no episode is in flight and later
 * episodes record the new version, episodes lagging more than max_staleness are dropped and refilled, and a whole
 * campaign trains every step exactly once on its own episodes with the lag bounded.
 */

const queue = 'unit-overlapped-steps';

interface Run {
  id: string;
  step: number;
  version: number | undefined;
  start: number;
  end: number;
}
/** Per campaign id: what ran and when. */
interface Trace {
  runs: Run[];
  inFlight: number;
  trainSteps: { stepId: number; ids: string[]; start: number; end: number }[];
  syncs: { version: number; inFlight: number; start: number; end: number }[];
  records: StepRecord[];
  /** Episode reps whose stored result carries an older weight version (recorded before a restart, say). */
  oldVersionReps?: Map<number, number>;
  episodeMs: number;
}
const traces = new Map<string, Trace>();
const trace = (campaignId: string, episodeMs = 60): Trace => {
  const t: Trace = { runs: [], inFlight: 0, trainSteps: [], syncs: [], records: [], episodeMs };
  traces.set(campaignId, t);
  return t;
};
const trainMs = 400;

const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const t = traces.get(input.campaign!)!;
    const start = Date.now();
    t.inFlight += 1;
    await delay(t.episodeMs);
    t.inFlight -= 1;
    const rep = input.repetition ?? 0;
    const version = t.oldVersionReps?.get(rep) ?? input.config.policy.weight_version;
    t.runs.push({ id: input.episodeId, step: input.step!, version, start, end: Date.now() });
    return {
      id: input.episodeId,
      outcome: rep % 2 === 0 ? 'success' : 'agent_failure',
      reward: rep % 2 === 0 ? 1 : 0,
      finishReason: 'done',
      policyTokens: 0,
      ...(version === undefined ? {} : { weightVersion: version }),
    };
  },
  async trainStep(input: { campaignId: string; stepId: number; items: { episodeId: string }[] }) {
    const start = Date.now();
    await delay(trainMs);
    traces.get(input.campaignId)!.trainSteps.push({
      stepId: input.stepId,
      ids: input.items.map((i) => i.episodeId),
      start,
      end: Date.now(),
    });
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { campaignId: string; stepId: number }) {
    return { path: `/weights/${input.stepId}` };
  },
  async syncWeights(input: { campaignId: string; weightVersion: number }) {
    const t = traces.get(input.campaignId)!;
    const start = Date.now();
    const inFlight = t.inFlight;
    await delay(50);
    t.syncs.push({ version: input.weightVersion, inFlight, start, end: Date.now() });
    return { weightVersion: input.weightVersion, servers: [{ baseUrl: 'http://policy/v1', seconds: 0.05 }] };
  },
  async recordStep(record: StepRecord) {
    traces.get(record.campaignId)!.records.push(record);
  },
  async ingestCandidates() {
    return { uids: ['t1', 't2', 't3', 't4'], excluded: 0, evaluationUids: ['t1', 't2', 't3', 't4'] };
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async releaseLearner() {
    return { released: true };
  },
  async writeManifest(input: { campaignId: string }) {
    return `/manifest/${input.campaignId}.json`;
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages() {
    return { system_messages: 'merged' };
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

const training: CampaignConfig['training'] = {
  steps: 3,
  groups_per_step: 1,
  group_size: 4,
  concurrency: 2,
  normalize_std: true,
  infra_refill_cap: 2,
  max_replacements: 0,
  max_staleness: 1,
  task_order: 'seeded',
  zero_variance_fallback: 'train_on_fewer',
  judge_mode: 'motivation',
};
const episode = {
  limits: { wall_clock_ms: 60_000 },
  policy: { sync_deadline_ms: 10_000, weight_version: 1 },
  sampling: { temperature: 1 },
} as never;

function stepInput(campaignId: string, step: number, extra: Partial<TrainingStepInput>): TrainingStepInput {
  return {
    campaignId,
    step,
    pool: ['t1', 't2', 't3'],
    suiteDir: '/suite',
    episode,
    training,
    learner: {} as never,
    policyServers: ['http://policy/v1'],
    weightVersion: step - 1,
    seed: 7,
    rolloutQueue: queue,
    gpuQueue: queue,
    infraBackoff: { initialMs: 20, maxMs: 40 },
    ...extra,
  };
}

/** Runs that overlap the time span [start, end]. */
const during = (runs: Run[], span: { start: number; end: number }) =>
  runs.filter((r) => r.start < span.end && r.end > span.start);

test('overlapped step: the next step samples during the update; the sync waits for no episode in flight', async () => {
  const id = 'overlap-step';
  // One episode at a time, 4 x 200 ms: the sampling outlasts the 400 ms update, so the sync lands mid-sampling.
  const t = trace(id, 200);
  // Step 2's groups, sampled ahead by step 1 on version 0: the step trains on them without sampling again.
  const sampled: SampledStep = {
    step: 2,
    startVersion: 0,
    trainVersion: 1,
    seconds: 1,
    groups: [
      {
        uid: 't9',
        episodes: [1, 0, 1, 0].map((reward, rep) => ({
          id: `${id}/step-2/t9#${rep}`,
          reward,
          outcome: reward ? 'success' : 'agent_failure',
          weightVersion: 0,
        })),
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
  const result = await env.client.workflow.execute(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId: `${id}/step-2`,
    args: [stepInput(id, 2, { sampled, sampleNext: true, training: { ...training, concurrency: 1 } })],
  });

  assert.deepEqual(
    t.trainSteps[0]!.ids,
    sampled.groups[0]!.episodes.map((e) => e.id),
    'trained on what it was given',
  );
  assert.equal(t.runs.filter((r) => r.step === 2).length, 0, 'step 2 is not sampled again');
  const train = t.trainSteps[0]!;
  assert.ok(during(t.runs, train).length > 0, 'step 3 episodes ran while the learner trained step 2');
  assert.equal(t.syncs.length, 1);
  const sync = t.syncs[0]!;
  assert.equal(sync.inFlight, 0, 'no episode in flight when the sync starts');
  assert.deepEqual(during(t.runs, sync), [], 'no episode runs during the sync');
  const before = t.runs.filter((r) => r.start < sync.start);
  const afterSync = t.runs.filter((r) => r.start >= sync.end);
  assert.ok(before.length > 0 && afterSync.length > 0, `${before.length} before, ${afterSync.length} after the sync`);
  assert.ok(before.every((r) => r.version === 1) && afterSync.every((r) => r.version === 2), 'each its version');

  assert.deepEqual(result.episodeLag, { mean: 1, max: 1 }, 'step 2 trained on episodes of version 0 from version 1');
  assert.equal(result.sampledWeightVersion, 0);
  assert.equal(result.weightVersion, 2);
  assert.deepEqual(
    t.records.map((r) => r.step),
    [2],
  );
  const next = result.next!;
  assert.equal(next.step, 3);
  assert.equal(next.trainVersion, 2);
  assert.equal(next.groups[0]!.episodes.length, 4);
  assert.ok(episodeLag(next).max <= 1);
  assert.ok(result.phaseSeconds!.update >= trainMs / 1000, JSON.stringify(result.phaseSeconds));
});

test('overlapped step: episodes lagging more than max_staleness versions are dropped and refilled', async () => {
  const run = async (id: string, maxStaleness: number) => {
    const t = trace(id);
    // Reps 0 and 1 come back as recorded on version 0 (before a restart); the learner trains from version 2.
    t.oldVersionReps = new Map([
      [0, 0],
      [1, 0],
    ]);
    const input = stepInput(id, 3, { training: { ...training, max_staleness: maxStaleness } });
    input.episode = { ...input.episode, policy: { ...input.episode.policy, weight_version: 2 } };
    const result = await env.client.workflow.execute(trainingStepWorkflow, {
      taskQueue: queue,
      workflowId: `${id}/step-3`,
      args: [input],
    });
    return { result, trained: result.groups[0]!.episodeIds.map((e) => e.slice(e.indexOf('#'))) };
  };
  const strict = await run('stale-1', 1);
  assert.equal(strict.result.staleEpisodes, 2);
  assert.deepEqual(strict.trained, ['#2', '#3', '#4', '#5'], 'the two lagging 2 versions were refilled');
  assert.deepEqual(strict.result.episodeLag, { mean: 0, max: 0 });
  const loose = await run('stale-2', 2);
  assert.equal(loose.result.staleEpisodes, 0);
  assert.deepEqual(loose.trained, ['#0', '#1', '#2', '#3'], 'a lag of 2 is within max_staleness 2');
  assert.deepEqual(loose.result.episodeLag, { mean: 1, max: 2 });
});

test('overlapped campaign: each step trains once on its own episodes, the next sampling overlaps it', async () => {
  const base = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const config: CampaignConfig = {
    ...base,
    probe: { ...base.probe, enabled: false },
    evaluation: { ...base.evaluation, before_training: false, repeats: 1, concurrency: 2 },
    training,
    learner: { ...base.learner, is_cap: 2 },
  };
  const id = 'overlap-campaign';
  const t = trace(id);
  const status = await env.client.workflow.execute(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ campaignId: id, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
  assert.equal(status.stage, 'done');
  assert.equal(status.step, 3);
  assert.deepEqual(
    t.trainSteps.map((s) => s.stepId),
    [1, 2, 3],
    'every step trained once, in order',
  );
  for (const s of t.trainSteps) {
    assert.equal(s.ids.length, 4);
    assert.ok(
      s.ids.every((e) => e.includes(`/step-${s.stepId}/`)),
      `step ${s.stepId} trains its own episodes`,
    );
  }
  const trainEpisodes = t.runs.filter((r) => r.step !== undefined);
  assert.equal(trainEpisodes.filter((r) => r.step === 4).length, 0, 'no step past the last is sampled');
  for (const step of [1, 2]) {
    const nextRuns = trainEpisodes.filter((r) => r.step === step + 1);
    assert.ok(during(nextRuns, t.trainSteps[step - 1]!).length > 0, `step ${step + 1} sampled during update ${step}`);
  }
  assert.ok(
    t.syncs.every((s) => s.inFlight === 0),
    'every sync found no episode in flight',
  );
  assert.deepEqual(
    t.records.map((r) => r.step),
    [1, 2, 3],
  );
  for (const r of t.records) assert.ok(r.episodeLag!.max <= 1, `step ${r.step}: lag ${JSON.stringify(r.episodeLag)}`);
  assert.equal(t.records[0]!.episodeLag!.max, 0, 'step 1 samples its own groups on the base weights');
  assert.ok(
    t.records.slice(1).some((r) => r.episodeLag!.max === 1),
    'a later step trained on episodes one version old',
  );
  assert.equal(t.records[2]!.phaseSeconds!.sample > 0, true);
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import type { StepRecord } from '../../activities/campaign-activities.ts';
import { writeStepsFile } from '../../campaign-records/steps-file.ts';
import type { TrainedEpisode } from '../../campaign-records/trained-episodes.ts';
import type { CampaignConfig } from '../../config/campaign-config.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import type { SampledStep } from '../../workflows/sampled-step.ts';
import { episodesToRead, trainedBatchRecord } from '../../workflows/trained-batch-record.ts';
import { trainingStepWorkflow, type TrainingStepInput } from '../../workflows/training-step-workflow.ts';
import { testTempDir } from '../helpers/temp-dir.ts';
import { mockedWorker, startWorkflowTestEnv, workflowBundle } from '../helpers/workflow-test-env.ts';

/**
 * Issue 40 (exact records): a training step that runs again may draw other episodes than the batch its learner
 * trained the first time (a lost episode now succeeds); the learner, which never trains a step twice, says so, and
 * the step's record (and steps.jsonl) describes the batch trained. The pure rule (workflows/trained-batch-record.ts),
 * then the scenario on a Temporal dev server with mocked activities, replayed from its history.
 */

const episode = (id: string, reward: number, weightVersion?: number) => ({
  id,
  reward,
  outcome: 'success' as const,
  ...(weightVersion === undefined ? {} : { weightVersion }),
});

const sample: SampledStep = {
  step: 1,
  startVersion: 0,
  trainVersion: 0,
  seconds: 1,
  groups: [{ uid: 't1', episodes: [episode('c/step-1/t1#0', 0.1, 0), episode('c/step-1/t1#1', 0.2, 0)] }],
  informativeGroups: 1,
  zeroVarianceGroups: 0,
  replacements: 0,
  lostGroups: 0,
  infraErrors: 0,
  staleEpisodes: 0,
  fallback: null,
};

const drawnRecord = {
  campaignId: 'c',
  step: 1,
  groups: [{ uid: 't1', rewards: [0.1, 0.2], episodeIds: ['c/step-1/t1#0', 'c/step-1/t1#1'] }],
  meanReward: 0.15,
  leakedInfraEpisodes: 0,
  episodeLag: { mean: 0, max: 0 },
  infraErrors: 0,
} as StepRecord;

test('the record of a mismatched step names the episodes trained, from memory and from the store', () => {
  const trained = ['c/step-1/t1#1', 'c/step-1/t1#2', 'c/step-1/t2#0'];
  assert.deepEqual(episodesToRead(sample, trained), ['c/step-1/t1#2', 'c/step-1/t2#0']);
  const read: TrainedEpisode[] = [
    { ...episode('c/step-1/t1#2', 0.6, 0), taskUid: 't1' },
    // One version older than the learner's weights: the lag is the trained batch's.
    { ...episode('c/step-1/t2#0', 0.7), weightVersion: -1, taskUid: 't2' },
  ];
  const record = trainedBatchRecord(drawnRecord, sample, trained, read);
  assert.equal(record.batchMismatch, true);
  assert.deepEqual(record.trainedEpisodeIds, trained);
  assert.deepEqual(record.groups, [
    { uid: 't1', rewards: [0.2, 0.6], episodeIds: ['c/step-1/t1#1', 'c/step-1/t1#2'] },
    { uid: 't2', rewards: [0.7], episodeIds: ['c/step-1/t2#0'] },
  ]);
  assert.ok(Math.abs(record.meanReward - 0.5) < 1e-12, String(record.meanReward));
  assert.deepEqual(record.episodeLag, { mean: 1 / 3, max: 1 });
  assert.equal(record.infraErrors, 0, "the drawing's counts stay this run's");
});

test('an id found nowhere stays in trainedEpisodeIds only; without ids the record only says the batch differed', () => {
  const record = trainedBatchRecord(drawnRecord, sample, ['c/step-1/t1#0', 'c/step-1/t1#9'], []);
  assert.deepEqual(record.groups, [{ uid: 't1', rewards: [0.1], episodeIds: ['c/step-1/t1#0'] }]);
  assert.deepEqual(record.trainedEpisodeIds, ['c/step-1/t1#0', 'c/step-1/t1#9']);
  assert.deepEqual(trainedBatchRecord(drawnRecord, sample, undefined, []), { ...drawnRecord, batchMismatch: true });
});

test('steps.jsonl says whether a step describes a batch a re-run did not draw', () => {
  const file = path.join(testTempDir('tbt-trained-batch-'), 'steps.jsonl');
  const base = { ...drawnRecord, update: { loss: 0.5 } };
  writeStepsFile(file, [base, { ...base, step: 2, batchMismatch: true }]);
  const lines = fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { batch_mismatch: boolean });
  assert.deepEqual(
    lines.map((l) => l.batch_mismatch),
    [false, true],
  );
});

// ---- the scenario on a dev server ----------------------------------------------------------------------------

const queue = 'unit-trained-batch-record';
/** The episode store: finished episodes by id, with their task (an infrastructure error is not kept). */
const store = new Map<string, EpisodeSummary & { taskUid: string }>();
/** Episode ids whose first run ends in an infrastructure error. */
const lostOnce = new Set<string>();
/** The learner's ledger: the sorted ids each step trained, by campaign and step. */
const ledger = new Map<string, string[]>();
const calls = { trainedEpisodes: [] as string[][], records: [] as StepRecord[] };

const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const stored = store.get(input.episodeId);
    if (stored) {
      const { taskUid: _uid, ...summary } = stored;
      return summary;
    }
    if (lostOnce.delete(input.episodeId))
      return { id: input.episodeId, outcome: 'infrastructure_error', reward: 0, finishReason: 'x', policyTokens: 0 };
    const rep = input.repetition ?? 0;
    const summary: EpisodeSummary = {
      id: input.episodeId,
      outcome: 'success',
      reward: (rep + 1) / 10,
      finishReason: 'done',
      policyTokens: 0,
      weightVersion: 0,
    };
    store.set(input.episodeId, { ...summary, taskUid: input.taskUid });
    return summary;
  },
  /** As the learner answers (gpu-learner control.py): a step it holds is never trained again. */
  async trainStep(input: { campaignId: string; stepId: number; items: { episodeId: string }[] }) {
    const key = `${input.campaignId}/${input.stepId}`;
    const offered = input.items.map((i) => i.episodeId).sort();
    const trained = ledger.get(key);
    const base = { stepId: input.stepId, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
    if (!trained) {
      ledger.set(key, offered);
      return { ...base, repeated: false };
    }
    const batchMatches = trained.join('\n') === offered.join('\n');
    return { ...base, repeated: true, batchMatches, ...(batchMatches ? {} : { trainedEpisodeIds: trained }) };
  },
  async trainedEpisodes(input: { episodeIds: string[] }): Promise<TrainedEpisode[]> {
    calls.trainedEpisodes.push(input.episodeIds);
    return input.episodeIds.flatMap((id) => {
      const e = store.get(id);
      return e
        ? [{ id, taskUid: e.taskUid, reward: e.reward, outcome: e.outcome, weightVersion: e.weightVersion }]
        : [];
    });
  },
  async exportWeights(input: { stepId: number }) {
    return { path: `/weights/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [{ baseUrl: 'http://policy/v1', seconds: 0.01 }] };
  },
  async recordStep(record: StepRecord) {
    calls.records.push(record);
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
  steps: 1,
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

function stepInput(campaignId: string): TrainingStepInput {
  return {
    campaignId,
    step: 1,
    pool: ['t1'],
    suiteDir: '/suite',
    episode: {
      limits: { wall_clock_ms: 60_000 },
      policy: { sync_deadline_ms: 10_000, weight_version: 0 },
      sampling: { temperature: 1 },
    } as never,
    training,
    learner: {} as never,
    policyServers: ['http://policy/v1'],
    weightVersion: 0,
    seed: 7,
    rolloutQueue: queue,
    gpuQueue: queue,
    infraBackoff: { initialMs: 10, maxMs: 20 },
  };
}

/** Whether the run's history holds the marker of patch `id`. */
async function hasPatch(workflowId: string, runId: string, id: string): Promise<boolean> {
  const history = await env.client.workflow.getHandle(workflowId, runId).fetchHistory();
  return (history.events ?? []).some((e) => {
    const data = e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads?.[0]?.data;
    return data ? (JSON.parse(Buffer.from(data).toString()) as { id: string }).id === id : false;
  });
}

test('a re-run step that drew other episodes records the batch its learner trained; its history replays', async () => {
  const id = 'rerun-step';
  const workflowId = `${id}/step-1`;
  const ids = [0, 1, 2, 3, 4].map((rep) => `${id}/step-1/t1#${rep}`);
  // The first run loses #0 to the infrastructure and trains on #1..#4 (the refill).
  lostOnce.add(ids[0]!);
  const first = await env.client.workflow.start(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId,
    args: [stepInput(id)],
  });
  const firstRecord = await first.result();
  assert.deepEqual(firstRecord.groups[0]!.episodeIds, ids.slice(1));
  assert.equal(firstRecord.batchMismatch, undefined);
  assert.equal(await hasPatch(workflowId, first.firstExecutionRunId, 'trained-batch-record'), false);

  // The re-run finds #1..#3 stored, plays #0 again (it succeeds now) and offers #0..#3: not what was trained.
  const rerun = await env.client.workflow.start(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId,
    args: [stepInput(id)],
  });
  const record = await rerun.result();
  assert.equal(record.repeatedUpdate, true);
  assert.equal(record.batchMismatch, true);
  assert.deepEqual(record.trainedEpisodeIds, ids.slice(1));
  assert.deepEqual(record.groups, [{ uid: 't1', rewards: [0.2, 0.3, 0.4, 0.5], episodeIds: ids.slice(1) }]);
  assert.ok(Math.abs(record.meanReward - 0.35) < 1e-12, String(record.meanReward));
  assert.deepEqual(calls.trainedEpisodes, [[ids[4]]], 'only the trained episode the re-run did not hold is read');
  assert.deepEqual(calls.records.at(-1), record, 'the stored record is the returned one');
  assert.equal(await hasPatch(workflowId, rerun.firstExecutionRunId, 'trained-batch-record'), true);

  const history = await rerun.fetchHistory();
  await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, 'replay-rerun-step');
});

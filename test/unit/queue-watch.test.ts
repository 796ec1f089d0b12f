import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createQueueWatchActivities } from '../../activities/queue-watch-activities.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import {
  campaignWorkflow,
  resumeUpdate,
  statusQuery,
  stopAfterStepUpdate,
  type CampaignStatus,
} from '../../workflows/campaign-workflow.ts';
import { pausedKey } from '../../workflows/search-attribute-keys.ts';
import { startWorkflowTestEnv, workflowBundle } from '../helpers/workflow-test-env.ts';

/**
 * Issue 40, item 6: a rollout or bookkeeping queue that no worker polls pauses the campaign with the queue named
 * (workflows/queue-watch.ts), on a throw-away Temporal dev server with mocked activities; the look at the rollout
 * queue's pollers is the real activity, served as the bookkeeping worker serves it. A queue that is only busy (a
 * poller, tasks waiting behind one slot) pauses nothing. Every test uses queue names of its own: the server
 * remembers a poller for 5 minutes.
 */

/** Episode ids and how often each ran, per campaign. */
const episodeRuns = new Map<string, Map<string, number>>();
const recorded = new Map<string, number[]>();
/** Campaign ids whose episodes take this long (a busy rollout worker). */
const slowEpisodesMs = new Map<string, number>();

const activities = {
  async runEpisode(input: { campaign?: string; episodeId: string }) {
    const runs = episodeRuns.get(input.campaign!) ?? new Map<string, number>();
    episodeRuns.set(input.campaign!, runs);
    runs.set(input.episodeId, (runs.get(input.episodeId) ?? 0) + 1);
    await delay(slowEpisodesMs.get(input.campaign!) ?? 0);
    const reward = Number(input.episodeId.endsWith('#0'));
    return { id: input.episodeId, outcome: 'success', reward, finishReason: 'done', policyTokens: 0 };
  },
  async ingestCandidates() {
    return { uids: ['t1', 't2'], excluded: 0, evaluationUids: ['t1', 't2'] };
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async writeManifest() {
    return '/manifest.json';
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages() {
    return { system_messages: 'separate' };
  },
  async ensurePolicyWeights() {},
  async stopLearner() {},
  async releaseLearner() {
    return { released: true };
  },
  async trainStep(input: { stepId: number }) {
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { campaignId: string; stepId: number }) {
    return { path: `/weights/${input.campaignId}/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [] };
  },
  async recordStep(input: { campaignId: string; step: number }) {
    recorded.set(input.campaignId, [...(recorded.get(input.campaignId) ?? []), input.step]);
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
};

let env: TestWorkflowEnvironment;
const running: { worker: Worker; run: Promise<void> }[] = [];
before(async () => {
  env = await startWorkflowTestEnv();
});
after(async () => {
  for (const w of running) w.worker.shutdown();
  await Promise.all(running.map((w) => w.run));
  await env?.teardown();
});

/**
 * A worker on `taskQueue`: `workflows` runs the workflows (as the orchestrator worker), `activities` polls the
 * queue's activity tasks, the queue watch's look included (as the bookkeeping, rollout and GPU workers).
 */
async function startWorker(
  taskQueue: string,
  options: { workflows?: boolean; activities?: boolean; slots?: number },
): Promise<Worker> {
  const worker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    ...(options.workflows ? { workflowBundle: await workflowBundle() } : {}),
    ...(options.activities ? { activities: { ...activities, ...createQueueWatchActivities() } } : {}),
    maxConcurrentActivityTaskExecutions: options.slots ?? 100,
  });
  running.push({ worker, run: worker.run() });
  return worker;
}

const base = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));

/** One step of one group of 4, no probe, no evaluation before; every queue wait 2 s, episodes of at most 1 s. */
function config(): CampaignConfig {
  return {
    ...base,
    episode: { ...base.episode, limits: { ...base.episode.limits, wall_clock_ms: 1000 } },
    probe: { ...base.probe, enabled: false },
    evaluation: { ...base.evaluation, before_training: false, repeats: 1 },
    training: { ...base.training, steps: 1, groups_per_step: 1, group_size: 4, max_replacements: 0 },
    recovery: { ...base.recovery, rollout_queue_wait_ms: 2000, bookkeeping_queue_wait_ms: 2000 },
  };
}

/** `training`: started as a run continued at the training stage (pool t1, t2), as after a committed step. */
function startCampaign(id: string, orchestrator: string, rollout: string, training = false) {
  const state = training
    ? { stage: 'train' as const, step: 0, pool: ['t1', 't2'], paused: false, stopAfterStep: false }
    : undefined;
  return env.client.workflow.start(campaignWorkflow, {
    taskQueue: orchestrator,
    workflowId: id,
    args: [{ campaignId: id, config: config(), suiteDir: '/suite', queues: { rollout, gpu: orchestrator }, state }],
  });
}

async function statusWhen(id: string, wanted: (s: CampaignStatus) => boolean): Promise<CampaignStatus> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const s = await env.client.workflow
      .getHandle(id)
      .query(statusQuery)
      .catch(() => undefined);
    if (s && wanted(s)) return s;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${id}'s status (last: ${JSON.stringify(s)})`);
    await delay(100);
  }
}

/** Every episode of the campaign ran exactly once. */
function assertEachEpisodeOnce(id: string, atLeast: number): void {
  const runs = [...(episodeRuns.get(id) ?? new Map<string, number>())];
  assert.ok(runs.length >= atLeast, `${runs.length} episodes`);
  assert.deepEqual(
    runs.filter(([, n]) => n !== 1),
    [],
  );
}

test('no worker polls the rollout queue: a pause naming it; resume, then a worker, and it goes on', async () => {
  const id = 'qw-rollout-missing';
  const [orchestrator, rollout] = ['qwa-orchestrator', 'qwa-rollout'];
  await startWorker(orchestrator, { workflows: true, activities: true });
  const handle = await startCampaign(id, orchestrator, rollout);
  // The ingest asks the policy server on the rollout queue how its template takes system messages.
  const paused = await statusWhen(id, (s) => s.paused);
  assert.equal(paused.pausedAt, 'the ingest');
  assert.match(paused.pauseReason ?? '', /^no worker polls task queue "qwa-rollout" \(the rollout queue\)/);
  assert.match(paused.pauseReason ?? '', /Start the rollout worker \(`tbt workers up`\)/);
  assert.equal((await handle.describe()).typedSearchAttributes.get(pausedKey), true);
  // A resume clears the pause; the queue still has no poller a full wait later, so it pauses again.
  assert.equal(
    await handle.executeUpdate(resumeUpdate),
    'resumed: the ingest keeps waiting for a worker on qwa-rollout; it pauses again if none polls within a full wait',
  );
  assert.equal((await handle.query(statusQuery)).paused, false);
  const again = await statusWhen(id, (s) => s.paused);
  assert.match(again.pauseReason ?? '', /no worker polls task queue "qwa-rollout"/);
  // A rollout worker: the waiting activity runs, the pause ends by itself and the campaign completes.
  await startWorker(rollout, { activities: true });
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.equal(status.paused, false);
  assert.equal(status.pauseReason, undefined);
  assert.equal((await handle.describe()).typedSearchAttributes.get(pausedKey), false);
  assert.deepEqual(recorded.get(id), [1]);
  assertEachEpisodeOnce(id, 4);
  // The run that paused and resumed replays on today's code.
  const history = await env.client.workflow.getHandle(id, handle.firstExecutionRunId).fetchHistory();
  await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `${id}-replay`);
});

test('a training step whose episodes wait on a rollout queue nobody polls pauses at the step, naming it', async () => {
  const id = 'qw-step-missing';
  const [orchestrator, rollout] = ['qwe-orchestrator', 'qwe-rollout'];
  await startWorker(orchestrator, { workflows: true, activities: true });
  const handle = await startCampaign(id, orchestrator, rollout, true);
  const paused = await statusWhen(id, (s) => s.paused);
  assert.equal(paused.pausedAt, 'training step 1');
  assert.match(paused.pauseReason ?? '', /^no worker polls task queue "qwe-rollout" \(the rollout queue\)/);
  assert.match(paused.pauseReason ?? '', /training step 1 goes on by itself once a worker polls/);
  // The step's episodes stay scheduled: none was given up or run meanwhile.
  assert.equal(episodeRuns.get(id), undefined);
  await startWorker(rollout, { activities: true });
  await statusWhen(id, (s) => !s.paused);
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.deepEqual(recorded.get(id), [1]);
  // 4 episodes of the step and 2 of the evaluation, each once: the waiting ones were not re-run.
  assertEachEpisodeOnce(id, 6);
  assert.equal(episodeRuns.get(id)?.size, 6);
});

test('a busy rollout queue (a poller, episodes waiting behind its one slot) pauses nothing', async () => {
  const id = 'qw-rollout-busy';
  const [orchestrator, rollout] = ['qwb-orchestrator', 'qwb-rollout'];
  slowEpisodesMs.set(id, 800);
  await startWorker(orchestrator, { workflows: true, activities: true });
  await startWorker(rollout, { activities: true, slots: 1 });
  const handle = await startCampaign(id, orchestrator, rollout);
  let pausedSeen: CampaignStatus | undefined;
  const result = handle.result() as Promise<CampaignStatus>;
  let done = false;
  while (!done) {
    const s = await handle.query(statusQuery).catch(() => undefined);
    if (s?.paused) pausedSeen ??= s;
    done = await Promise.race([result.then(() => true), delay(100).then(() => false)]);
  }
  const status = await result;
  assert.equal(pausedSeen, undefined, JSON.stringify(pausedSeen));
  assert.equal(status.stage, 'done');
  // 4 training episodes and 2 evaluation ones, one at a time: longer than the 2 s wait.
  assertEachEpisodeOnce(id, 6);
});

test('no worker polls the bookkeeping queue: the campaign pauses naming it and goes on once one polls', async () => {
  const id = 'qw-bookkeeping-missing';
  const [orchestrator, rollout] = ['qwc-orchestrator', 'qwc-rollout'];
  // As the orchestrator worker: workflows only, never the queue's activity tasks.
  await startWorker(orchestrator, { workflows: true });
  await startWorker(rollout, { activities: true });
  const handle = await startCampaign(id, orchestrator, rollout);
  const paused = await statusWhen(id, (s) => s.paused);
  assert.equal(paused.pausedAt, 'the ingest');
  assert.match(paused.pauseReason ?? '', /^no worker polls task queue "qwc-orchestrator" \(the bookkeeping queue\)/);
  await startWorker(orchestrator, { activities: true });
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.equal(status.paused, false);
  assert.deepEqual(recorded.get(id), [1]);
  assertEachEpisodeOnce(id, 4);
});

test('a stop while paused on a missing rollout worker abandons the stage and writes the report', async () => {
  const id = 'qw-rollout-stop';
  const [orchestrator, rollout] = ['qwd-orchestrator', 'qwd-rollout'];
  await startWorker(orchestrator, { workflows: true, activities: true });
  const handle = await startCampaign(id, orchestrator, rollout);
  await statusWhen(id, (s) => s.paused);
  assert.equal(
    await handle.executeUpdate(stopAfterStepUpdate),
    'stops now: the ingest is abandoned and the report is written',
  );
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'stopped');
  assert.equal(status.paused, false);
  assert.equal(status.report?.html, '/report.html');
  assert.equal(episodeRuns.get(id), undefined);
});

test('a stop while a training step waits on a missing rollout worker cancels the step: nothing trained', async () => {
  const id = 'qw-step-stop';
  const [orchestrator, rollout] = ['qwf-orchestrator', 'qwf-rollout'];
  await startWorker(orchestrator, { workflows: true, activities: true });
  const handle = await startCampaign(id, orchestrator, rollout, true);
  await statusWhen(id, (s) => s.paused && s.pausedAt === 'training step 1');
  assert.equal(
    await handle.executeUpdate(stopAfterStepUpdate),
    'stops now: training step 1 is abandoned and the report is written',
  );
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'stopped');
  assert.equal(status.step, 0);
  assert.equal((await env.client.workflow.getHandle(`${id}/step-1`).describe()).status.name, 'CANCELLED');
  assert.equal(recorded.get(id), undefined);
  assert.equal(episodeRuns.get(id), undefined);
});

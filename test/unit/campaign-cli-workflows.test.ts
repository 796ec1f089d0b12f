import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, WorkflowFailedError } from '@temporalio/client';
import { MockActivityEnvironment, type TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { campaignTrainingOn } from '../../activities/campaign-training-servers.ts';
import { withFailureMapping } from '../../activities/temporal-failure.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError } from '../../core/errors.ts';
import { campaignWorkflow, statusQuery, type CampaignStatus } from '../../workflows/campaign-workflow.ts';
import { pausedKey } from '../../workflows/search-attribute-keys.ts';
import type { CampaignConfig } from '../../config/campaign-config.ts';
import { campaign, runEvaluation } from '../../cli/commands/campaign.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The campaign commands that act on or wait for a workflow, run as the CLI runs them (in this process) against a
 * throw-away Temporal dev server with mocked activities: `tbt campaign terminate` ends the campaign and its
 * children with the reason, and a command that waited on a workflow that failed prints the explained failure
 * (cli/workflow-failure-text.ts) instead of a bare "Workflow execution failed".
 */

const prefix = 'unit-cli';
const queue = `${prefix}-orchestrator`;

/** Campaign ids whose probe episodes hang until cancelled. */
const hanging = new Set<string>();
/** Campaign ids whose learner hangs in training step 2 until cancelled (a long step to terminate in). */
const hangingStep2 = new Set<string>();
/** Per campaign: the steps the learner was asked for, the steps recorded, policy servers asked for. */
const calls = new Map<string, { trainStep: number[]; recordStep: number[]; ensurePolicyServer: number }>();
const callsOf = (id: string) => {
  if (!calls.has(id)) calls.set(id, { trainStep: [], recordStep: [], ensurePolicyServer: 0 });
  return calls.get(id)!;
};
/** Campaign ids whose policy server fails to start (an infrastructure failure) the next N times. */
const policyServerFailures = new Map<string, number>();
const activities = withFailureMapping({
  async runEpisode(input: { campaign?: string; episodeId: string }) {
    if (hanging.has(input.campaign!)) await Context.current().sleep(120_000);
    return { id: input.episodeId, outcome: 'success', reward: 1, finishReason: 'done', policyTokens: 0 };
  },
  async ingestCandidates(input: { campaignId: string }) {
    if (input.campaignId.startsWith('bad-'))
      throw new BadInputError('campaign.yaml: field exclude_uids: uid list has a blank line 3');
    return { uids: ['t1', 't2'], excluded: 0, evaluationUids: ['t1', 't2'] };
  },
  async latestCheckpoint(input: { campaignId: string }) {
    throw new BadInputError(`campaign ${input.campaignId} has no selected pool: pass --tasks`);
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async writeManifest() {
    return '/manifest.json';
  },
  async ensurePolicyServer(input: { campaignId: string }) {
    callsOf(input.campaignId).ensurePolicyServer += 1;
    const failures = policyServerFailures.get(input.campaignId) ?? 0;
    if (failures > 0) {
      policyServerFailures.set(input.campaignId, failures - 1);
      throw ApplicationFailure.nonRetryable('policy server did not come up: connection refused', 'InfrastructureError');
    }
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
  async trainStep(input: { campaignId: string; stepId: number }) {
    callsOf(input.campaignId).trainStep.push(input.stepId);
    if (input.stepId === 2 && hangingStep2.has(input.campaignId)) await Context.current().sleep(120_000);
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { campaignId: string; stepId: number }) {
    return { path: `/weights/${input.campaignId}/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [] };
  },
  async recordStep(input: { campaignId: string; step: number }) {
    callsOf(input.campaignId).recordStep.push(input.step);
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
});

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<unknown>;
const saved = { ...process.env };
before(async () => {
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  running = worker.run();
  // What the CLI reads: this server, these queues, an empty state folder (no learner of ours runs here).
  process.env.TBT_TEMPORAL_ADDRESS = env.address;
  process.env.TBT_TEMPORAL_NAMESPACE = env.namespace ?? 'default';
  process.env.TBT_TASK_QUEUE_PREFIX = prefix;
  process.env.TBT_STATE_DIR = testTempDir('tbt-cli-workflows-');
});
after(async () => {
  process.env = saved;
  worker?.shutdown();
  await running;
  await env?.teardown();
});

const campaignConfig = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));

function startCampaign(campaignId: string, config: CampaignConfig = campaignConfig, gpuQueue = queue) {
  return env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: campaignId,
    args: [{ campaignId, config, suiteDir: '/suite', queues: { rollout: queue, gpu: gpuQueue } }],
  });
}

/** A short campaign: no probe, `steps` steps of one group of 2, the evaluation before training as configured. */
function shortCampaign(steps: number, beforeTraining: boolean, recovery?: Partial<CampaignConfig['recovery']>) {
  return {
    ...campaignConfig,
    probe: { ...campaignConfig.probe, enabled: false },
    evaluation: { ...campaignConfig.evaluation, before_training: beforeTraining },
    training: { ...campaignConfig.training, steps, groups_per_step: 1, group_size: 2, max_replacements: 0 },
    recovery: { ...campaignConfig.recovery, ...recovery },
  };
}

async function statusWhen(id: string, wanted: (s: CampaignStatus) => boolean): Promise<CampaignStatus> {
  return until(`${id}'s status`, async () => {
    const s = await env.client.workflow.getHandle(id).query(statusQuery);
    return wanted(s) ? s : undefined;
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(100);
  }
}

/** What `fn` prints with console.log and console.error, and what it returns or throws. */
async function captured<T>(fn: () => Promise<T>): Promise<{ out: string; err: string; result?: T; error?: unknown }> {
  const out: string[] = [];
  const err: string[] = [];
  const { log, error } = console;
  console.log = (...a: unknown[]) => void out.push(a.join(' '));
  console.error = (...a: unknown[]) => void err.push(a.join(' '));
  try {
    const result = await fn();
    return { out: out.join('\n'), err: err.join('\n'), result };
  } catch (e) {
    return { out: out.join('\n'), err: err.join('\n'), error: e };
  } finally {
    console.log = log;
    console.error = error;
  }
}

test('tbt campaign terminate: the campaign and its probe child end with the reason and how to resume', async () => {
  hanging.add('cli-term');
  const handle = await startCampaign('cli-term');
  const probe = env.client.workflow.getHandle('cli-term/probe');
  await until('the probe child', async () => ((await probe.describe()).status.name === 'RUNNING' ? true : undefined));
  const run = await captured(() => campaign(['terminate', 'cli-term', '--reason', 'operator: wrong model']));
  hanging.delete('cli-term');
  assert.equal(run.error, undefined, String(run.error));
  assert.equal(run.result, 0, run.err);
  assert.equal((await handle.describe()).status.name, 'TERMINATED');
  const ended = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(ended instanceof WorkflowFailedError && ended.message === 'operator: wrong model', String(ended));
  // The child is started with the default parent close policy (TERMINATE): it ends with the campaign.
  assert.equal(
    await until('the probe ended', async () => {
      const s = (await probe.describe()).status.name;
      return s === 'RUNNING' ? undefined : s;
    }),
    'TERMINATED',
  );
  assert.match(run.out, /terminated campaign cli-term \(run [\w-]+\): operator: wrong model/);
  assert.match(run.out, /cli-term\/probe \(probeWorkflow\): terminated with it/);
  assert.match(run.out, /resume: `tbt campaign resume cli-term` starts it again from its last committed training step/);
  // A second terminate says there is nothing to terminate (exit 1), naming the status.
  const again = await captured(() => campaign(['terminate', 'cli-term']));
  assert.equal(again.result, 1);
  assert.match(again.err, /cli-term is not running \(TERMINATED\): nothing to terminate/);
});

test('tbt campaign follow of a campaign failed on bad input: the field, the class, what to do next', async () => {
  const handle = await startCampaign('bad-follow');
  await handle.result().catch(() => undefined);
  const run = await captured(() => campaign(['follow', 'bad-follow']));
  const message = (run.error as Error | undefined)?.message ?? '';
  assert.match(message, /^campaign bad-follow failed: campaign\.yaml: field exclude_uids: uid list has a blank/);
  assert.match(message, /class: bad input \(BadInputError\)/);
  assert.match(message, /activity ingestCandidates/);
  assert.match(message, /next: fix the file and field/);
  assert.doesNotMatch(message, /^Workflow execution failed$/m);
});

test('tbt eval run that fails: the explained failure, with the same command line to run again', async () => {
  const args = ['--config', 'config/local.yaml', '--campaign', 'cli-eval'];
  const run = await captured(() => runEvaluation(args));
  const message = (run.error as Error | undefined)?.message ?? '';
  assert.match(message, /^evaluation cli-eval\/eval-run-\d+ failed: campaign cli-eval has no selected pool/);
  assert.match(message, /class: bad input \(BadInputError\)/);
  assert.match(message, /`tbt eval run --config config\/local\.yaml --campaign cli-eval`/);
});

test('terminate mid-step, then tbt campaign resume: on from the last committed step, none trained twice', async () => {
  const id = 'cli-resume';
  hangingStep2.add(id);
  await startCampaign(id, shortCampaign(3, false));
  await until('step 2 on the learner', async () => (callsOf(id).trainStep.includes(2) ? true : undefined));
  assert.equal((await captured(() => campaign(['terminate', id]))).result, 0);
  hangingStep2.delete(id);
  const resumed = await captured(() => campaign(['resume', id]));
  assert.equal(resumed.error, undefined, String(resumed.error));
  assert.equal(resumed.result, 0, resumed.err);
  assert.match(resumed.out, /was terminated: resumed from stage train, after 1 committed training steps/);
  const status = (await env.client.workflow.getHandle(id).result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.equal(status.step, 3);
  // Step 1 was committed before the terminate: never asked again. Step 2 is asked again (the learner answers a
  // step it already applied from its store); each step is recorded once.
  assert.deepEqual(callsOf(id).trainStep, [1, 2, 2, 3]);
  assert.deepEqual(callsOf(id).recordStep, [1, 2, 3]);
  // A completed campaign is not resumed.
  const again = await captured(() => campaign(['resume', id]));
  assert.equal(again.result, 1);
  assert.match(again.err, /cli-resume completed .*nothing to resume/);
});

test('a GPU queue without a poller pauses the campaign, naming the queue; a worker and a resume go on', async () => {
  const id = 'cli-no-poller';
  const gpuQueue = `${prefix}-gpu-late`;
  const handle = await startCampaign(id, shortCampaign(1, false, { gpu_queue_wait_ms: 10_000 }), gpuQueue);
  const notPaused = await captured(() => campaign(['resume', id]));
  assert.equal(notPaused.result, 1);
  assert.match(notPaused.err, /resume refused: the campaign is not paused/);
  const paused = await statusWhen(id, (s) => s.paused);
  assert.equal(paused.pausedAt, 'the ingest');
  assert.match(paused.pauseReason ?? '', /no worker polls task queue "unit-cli-gpu-late"/);
  assert.match(paused.pauseReason ?? '', /runs again by itself in 5 min, or now on `tbt campaign resume`/);
  const described = await handle.describe();
  assert.equal(described.typedSearchAttributes.get(pausedKey), true);
  const shown = await captured(() => campaign(['status', id]));
  assert.match(shown.err, /paused: the ingest failed for an infrastructure reason: no worker polls task queue/);
  const gpuWorker = await mockedWorker(env, gpuQueue, activities);
  const gpuRunning = gpuWorker.run();
  try {
    const resumed = await captured(() => campaign(['resume', id]));
    assert.equal(resumed.result, 0, resumed.err);
    assert.match(resumed.out, /cli-no-poller: resumed: the ingest runs again now/);
    const status = (await handle.result()) as CampaignStatus;
    assert.equal(status.stage, 'done');
    assert.equal(status.paused, false);
    assert.equal((await handle.describe()).typedSearchAttributes.get(pausedKey), false);
  } finally {
    gpuWorker.shutdown();
    await gpuRunning;
  }
});

test('a policy server that is down pauses the campaign, which runs the stage again by itself', async () => {
  const id = 'cli-auto-retry';
  policyServerFailures.set(id, 2);
  const config = shortCampaign(1, true, { paused_stage_retry_ms: 1000, paused_stage_retry_max_ms: 2000 });
  const handle = await startCampaign(id, config);
  const paused = await statusWhen(id, (s) => s.paused);
  // The ingest asks the policy server how its template takes system messages: the first stage to need it.
  assert.equal(paused.pausedAt, 'the ingest');
  assert.match(paused.pauseReason ?? '', /policy server did not come up: connection refused \(infrastructure/);
  const status = (await handle.result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  // Two failures, each followed by an automatic retry; then the evaluation before, the step and the one after.
  assert.ok(callsOf(id).ensurePolicyServer >= 5, String(callsOf(id).ensurePolicyServer));
  assert.deepEqual(callsOf(id).recordStep, [1]);
});

test('pause and stop are Updates that answer when they take effect', async () => {
  const id = 'cli-updates';
  hanging.add(id);
  const handle = await startCampaign(id);
  const probe = env.client.workflow.getHandle(`${id}/probe`);
  await until('the probe child', async () => ((await probe.describe()).status.name === 'RUNNING' ? true : undefined));
  const paused = await captured(() => campaign(['pause', id, '--reason', 'checking the judge']));
  assert.equal(paused.result, 0, paused.err);
  assert.match(paused.out, /cli-updates: pauses before training step 1, once the stages before training end/);
  assert.equal((await handle.query(statusQuery)).pauseReason, 'checking the judge');
  const stopped = await captured(() => campaign(['stop', id]));
  assert.match(stopped.out, /cli-updates: stops before training step 1, once the stages before training end/);
  await handle.terminate('test done');
  hanging.delete(id);
});

test('an evaluation of the servers a campaign is training on is refused while it trains', async () => {
  const id = 'cli-training-servers';
  hangingStep2.add(id);
  const config = shortCampaign(3, false);
  const ours = config.episode.policy.base_url;
  await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ campaignId: id, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
    memo: { config },
  });
  const ask = (campaignId: string, servers: string[]) =>
    new MockActivityEnvironment(undefined, { client: env.client }).run(campaignTrainingOn, { campaignId, servers });
  try {
    await until('step 2 on the learner', async () => (callsOf(id).trainStep.includes(2) ? true : undefined));
    assert.deepEqual(await ask(id, [ours, 'http://elsewhere.test/v1']), [ours], 'only the campaign server');
    assert.deepEqual(await ask('no-such-campaign', [ours]), []);
  } finally {
    await env.client.workflow.getHandle(id).terminate('test done');
    hangingStep2.delete(id);
  }
  assert.deepEqual(await ask(id, [ours]), [], 'a campaign that is not running trains on nothing');
});

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { Context } from '@temporalio/activity';
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { campaignWorkflow, pauseSignal, statusQuery, stopAfterStepSignal } from '../../workflows/campaign-workflow.ts';
import { evaluationWorkflow } from '../../workflows/evaluation-workflow.ts';
import { noWorkerPollingType } from '../../workflows/missing-poller.ts';
import { pausedKey } from '../../workflows/search-attribute-keys.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * What the Temporal UI shows of our workflows (docs/temporal-ui.md), on a real dev server with mocked activities:
 * episode activities named by `uid#rep` (activity id and summary, re-runs with `~retry-n`), children's static
 * summaries, the campaign's and a shard's current details, `TbtPaused` on a paused campaign, and a
 * schedule-to-start timeout that names the queue nobody polls.
 */

const queue = 'unit-temporal-ui';

/** Campaign ids whose episodes hang until cancelled; the others end at once, `~retry`-less ids of `flaky-` in error. */
const hanging = new Set<string>();
const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    if (hanging.has(input.campaign!)) await Context.current().sleep(120_000);
    const lost = input.campaign!.startsWith('flaky-') && !input.episodeId.includes('~retry');
    return {
      id: input.episodeId,
      outcome: lost ? 'infrastructure_error' : 'success',
      reward: lost ? 0 : 1,
      finishReason: lost ? 'infrastructure_error' : 'done',
      policyTokens: 0,
    };
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
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
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
  async stopLearner() {},
  async releaseLearner() {
    return { released: true };
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

const episode = {
  limits: { wall_clock_ms: 60_000 },
  policy: { sync_deadline_ms: 10_000 },
  sampling: { temperature: 1 },
} as never;
const campaignConfig = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));

function evaluationArgs(campaignId: string, uids: string[], repeats: number, shardSize: number) {
  return {
    uids,
    repeats,
    concurrency: 8,
    shardSize,
    suiteDir: '/suite',
    episode,
    campaignId,
    rolloutQueue: queue,
    maxReruns: 3,
    infraBackoff: { initialMs: 50, maxMs: 100 },
    label: 'x',
  };
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(100);
  }
}

/** The summary of every scheduled activity in a workflow's history, keyed by activity id. */
async function activitySummaries(handle: WorkflowHandle): Promise<Map<string, string>> {
  const history = await handle.fetchHistory();
  const out = new Map<string, string>();
  for (const e of history.events ?? []) {
    const attrs = e.activityTaskScheduledEventAttributes;
    if (!attrs) continue;
    const summary = e.userMetadata?.summary;
    out.set(attrs.activityId!, summary ? defaultPayloadConverter.fromPayload<string>(summary) : '');
  }
  return out;
}

async function currentDetails(handle: WorkflowHandle): Promise<string> {
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return metadata.currentDetails ?? '';
}

test('a shard: pending episodes carry their episode id as activity id and a uid#rep summary', async () => {
  hanging.add('ui-shard');
  const evaluation = await env.client.workflow.start(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'ui-shard/eval-x',
    args: [evaluationArgs('ui-shard', ['alpha', 'beta', 'gamma'], 2, 4)],
  });
  try {
    const shard = env.client.workflow.getHandle('ui-shard/eval-x/shard-0');
    const pending = await until('4 pending episodes', async () => {
      const d = await shard.describe();
      return d.raw.pendingActivities?.length === 4 ? d.raw.pendingActivities : undefined;
    });
    assert.deepEqual(pending.map((a) => a.activityId).sort(), [
      'ui-shard/eval-x/alpha#0',
      'ui-shard/eval-x/alpha#1',
      'ui-shard/eval-x/beta#0',
      'ui-shard/eval-x/beta#1',
    ]);
    const summaries = await activitySummaries(shard);
    assert.equal(summaries.get('ui-shard/eval-x/beta#1'), 'eval · beta#1');
    assert.equal(await (await shard.describe()).staticSummary(), 'eval shard 1 of 2: keys 0-3 of 6');
    assert.match((await (await shard.describe()).staticDetails()) ?? '', /tasks alpha \.\. beta x 2 episodes/);
    assert.equal(await currentDetails(shard), '0/4 keys done · 4 in flight');
    // The bound (8) covers both shards' keys: the first gives its spare slots back and the second runs beside it.
    assert.match(await currentDetails(evaluation), /^shards 1, 2 of 2 running; 0\/6 keys done/);
  } finally {
    await evaluation.terminate('test over');
    hanging.delete('ui-shard');
  }
});

test('a re-run after an infrastructure error is named `~retry-1` in its activity id and summary', async () => {
  await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'flaky-ui/eval-x',
    args: [evaluationArgs('flaky-ui', ['alpha'], 1, 10)],
  });
  const summaries = await activitySummaries(env.client.workflow.getHandle('flaky-ui/eval-x/shard-0'));
  assert.deepEqual(
    [...summaries],
    [
      ['flaky-ui/eval-x/alpha#0', 'eval · alpha#0'],
      ['flaky-ui/eval-x/alpha#0~retry-1', 'eval · alpha#0 ~retry-1'],
    ],
  );
});

test('a campaign: the probe child has a summary, the details say it probes, a pause is flagged at once', async () => {
  hanging.add('ui-probe');
  const campaign = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: 'ui-probe',
    args: [
      { campaignId: 'ui-probe', config: campaignConfig, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } },
    ],
  });
  try {
    const probe = env.client.workflow.getHandle('ui-probe/probe');
    const summary = await until('the probe child', async () => (await probe.describe()).staticSummary());
    assert.equal(summary, `probe: 2 candidates x ${campaignConfig.probe.repeats} episodes`);
    assert.equal(await currentDetails(campaign), 'probing 2 candidates');
    // A pause requested mid-probe is searchable at once and named in the details.
    await campaign.signal(pauseSignal);
    await until('TbtPaused = true', async () =>
      (await campaign.describe()).typedSearchAttributes.get(pausedKey) ? true : undefined,
    );
    assert.equal(
      await currentDetails(campaign),
      'probing 2 candidates · pause requested: takes effect before the next training step',
    );
  } finally {
    await campaign.terminate('test over');
    hanging.delete('ui-probe');
  }
});

test('a campaign: a training step child has a static summary, the campaign details name the step', async () => {
  hanging.add('ui-step');
  const t = campaignConfig.training;
  const campaign = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: 'ui-step',
    args: [
      {
        campaignId: 'ui-step',
        config: campaignConfig,
        suiteDir: '/suite',
        queues: { rollout: queue, gpu: queue },
        state: { stage: 'train', step: 0, pool: ['t1', 't2'], paused: false, stopAfterStep: false },
      },
    ],
  });
  try {
    const step = env.client.workflow.getHandle('ui-step/step-1');
    const summary = await until('the step child', async () => (await step.describe()).staticSummary());
    assert.equal(summary, `step 1 of ${t.steps}: ${t.groups_per_step} groups x ${t.group_size}`);
    assert.equal(await currentDetails(campaign), `step 1/${t.steps} training`);
    const sampling = await until('sampling details', async () => {
      const d = await currentDetails(step);
      return d.includes('in flight') ? d : undefined;
    });
    assert.match(sampling, /^sampling step 1: 0 episodes done, \d+ in flight$/);
  } finally {
    await campaign.terminate('test over');
    hanging.delete('ui-step');
  }
});

test('a paused campaign: TbtPaused finds it, the details and status give the reason, stopping clears it', async () => {
  const reason = 'step 1: every group was lost to infrastructure errors';
  const campaign = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: 'ui-paused',
    args: [
      {
        campaignId: 'ui-paused',
        config: campaignConfig,
        suiteDir: '/suite',
        queues: { rollout: queue, gpu: queue },
        state: { stage: 'train', step: 0, pool: ['t1'], paused: true, pauseReason: reason, stopAfterStep: false },
      },
    ],
  });
  const steps = campaignConfig.training.steps;
  const found = await until('the campaign listed by TbtPaused', async () => {
    for await (const w of env.client.workflow.list({ query: 'TbtPaused = true AND TbtCampaign = "ui-paused"' }))
      return w.workflowId;
    return undefined;
  });
  assert.equal(found, 'ui-paused');
  assert.equal((await campaign.describe()).typedSearchAttributes.get(pausedKey), true);
  assert.equal(
    await currentDetails(campaign),
    `paused before step 1/${steps}: ${reason}. Resume: tbt campaign resume ui-paused`,
  );
  // A pause signal's own reason replaces it; `status` carries it too.
  await campaign.signal(pauseSignal, { reason: 'operator: disk full' });
  assert.equal((await campaign.query(statusQuery)).pauseReason, 'operator: disk full');
  assert.match(await currentDetails(campaign), /^paused before step 1\/\d+: operator: disk full\./);
  // Stopping ends the wait: the attribute is cleared, the campaign reports and ends 'stopped'.
  await campaign.signal(stopAfterStepSignal);
  const status = await campaign.result();
  assert.equal(status.stage, 'stopped');
  assert.equal((await campaign.describe()).typedSearchAttributes.get(pausedKey), false);
  assert.equal(await currentDetails(campaign), `stopped after step 0/${steps}; report /report.html`);
});

test('a schedule-to-start timeout names the task queue nobody polls', async () => {
  const bundle = await bundleWorkflowCode({
    workflowsPath: path.join(repoRoot, 'test', 'unit', 'missing-poller-workflow.ts'),
    logger: { log() {}, info() {}, warn() {}, error: console.error, debug() {}, trace() {} } as never,
  });
  const own = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: `${queue}-poller`,
    workflowBundle: bundle,
  });
  await own.runUntil(async () => {
    const err = await env.client.workflow
      .execute('unpolledQueueWorkflow', {
        taskQueue: `${queue}-poller`,
        workflowId: 'ui-unpolled',
        args: ['tbt-gpu-nobody'],
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(err instanceof WorkflowFailedError, String(err));
    const cause = err.cause as { type?: string; message: string };
    assert.equal(cause.type, noWorkerPollingType);
    assert.match(cause.message, /^no worker polls task queue "tbt-gpu-nobody": activity startLearner waited/);
  });
});

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { withFailureMapping } from '../../activities/temporal-failure.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError } from '../../core/errors.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { followEvaluation } from '../../cli/evaluation-progress.ts';
import { resumeUpdate } from '../../workflows/campaign-workflow.ts';
import { pausedKey } from '../../workflows/search-attribute-keys.ts';
import {
  evaluationOutageWaits,
  scheduledEvaluationWorkflow,
  type ScheduledEvaluationInput,
} from '../../workflows/scheduled-evaluation-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * Scheduled evaluations (`tbt eval schedule`, `tbt eval run`) resume: the label is stable per (campaign, step, what
 * is evaluated), so a run that timed out, failed or is simply run again evaluates under the same child workflow id
 * and episode ids, and the episodes that already finished are returned from the store instead of being played
 * again. A second run while the first one's evaluation still runs waits for it instead of starting a second copy.
 * The evaluation's own embedded policy server is stopped when it ends, after success and after failure.
 */

const queue = 'unit-scheduled-evaluation';
const local = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
const config = { ...local, evaluation: { ...local.evaluation, concurrency: 8 } };

/** Per campaign: the episode store, the episodes actually played, the servers started and stopped, a held task. */
interface CampaignDouble {
  stored: Map<string, EpisodeSummary>;
  played: string[];
  servers: string[];
  stopped: string[];
  synced: number;
  aggregateFails: boolean;
  /** Aggregations still to fail as an infrastructure failure (Postgres down past the activity's retries). */
  aggregateOutages?: number;
  held?: { uid: string; release: Promise<'finish' | 'abandon'> };
}
const doubles = new Map<string, CampaignDouble>();
function double(campaignId: string): CampaignDouble {
  let d = doubles.get(campaignId);
  if (!d)
    doubles.set(
      campaignId,
      (d = { stored: new Map(), played: [], servers: [], stopped: [], synced: 0, aggregateFails: false }),
    );
  return d;
}
/** The campaign a server id or an episode id belongs to (each starts with `<campaign>/`). */
const owner = (id: string) => double(id.split('/')[0]!);

const activities = withFailureMapping({
  async latestCheckpoint() {
    return { step: 4, exportPath: '/state/learners/c/exports/step-4', pool: ['a', 'b', 'c'] };
  },
  async ensurePolicyServer(input: { campaignId: string }) {
    owner(input.campaignId).servers.push(input.campaignId);
    return { baseUrl: 'http://eval-server.test/v1', model: 'm' };
  },
  // The campaign `shared` trains on every server asked about; the others train on none.
  async campaignTrainingOn(input: { campaignId: string; servers: string[] }) {
    return input.campaignId === 'shared' ? input.servers : [];
  },
  async ensurePolicyWeights(input: { campaignId: string }) {
    owner(input.campaignId).synced += 1;
  },
  async stopLearner(input: { campaignId: string }) {
    owner(input.campaignId).stopped.push(input.campaignId);
  },
  async releaseLearner() {
    return { released: true };
  },
  // As the real activity: a finished episode's id returns its stored summary without playing it again.
  async runEpisode(input: { episodeId: string; taskUid: string }): Promise<EpisodeSummary> {
    const d = owner(input.episodeId);
    const done = d.stored.get(input.episodeId);
    if (done) return done;
    d.played.push(input.episodeId);
    if (d.held?.uid === input.taskUid && (await d.held.release) === 'abandon')
      throw new Error('the episode was abandoned with its workflow');
    const summary: EpisodeSummary = {
      id: input.episodeId,
      outcome: 'success',
      reward: 1,
      finishReason: 'done',
      policyTokens: 0,
    };
    d.stored.set(input.episodeId, summary);
    return summary;
  },
  async aggregateEvaluation(input: { campaignId: string; label: string }) {
    const d = double(input.campaignId);
    if (d.aggregateFails) throw new BadInputError('the aggregate was refused (test)');
    if (d.aggregateOutages) {
      d.aggregateOutages -= 1;
      // As the activity's retries running out: the last attempt's infrastructure failure, no retry left.
      throw ApplicationFailure.nonRetryable('connect ECONNREFUSED 127.0.0.1:5432 (test)', 'InfrastructureError');
    }
    return { aggregate: `eval-${input.label}.json`, summary: 'ok' };
  },
});

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

function input(campaignId: string): ScheduledEvaluationInput {
  return { campaignId, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue }, repeats: 2 };
}

let runs = 0;
function start(campaignId: string, options: { workflowRunTimeout?: string } = {}) {
  runs += 1;
  return env.client.workflow.start(scheduledEvaluationWorkflow, {
    taskQueue: queue,
    workflowId: `${campaignId}-tick-${runs}`,
    args: [input(campaignId)],
    ...options,
  });
}

/** Evaluation child workflows of a campaign: one entry per run (a re-used workflow id appears once per run). */
async function evaluationRuns(campaignId: string): Promise<{ workflowId: string; status: string }[]> {
  const found = [];
  for await (const w of env.client.workflow.list({ query: `WorkflowType = 'evaluationWorkflow'` }))
    if (w.workflowId.startsWith(`${campaignId}/`)) found.push({ workflowId: w.workflowId, status: w.status.name });
  return found;
}

async function until(what: string, done: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; !(await done());) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function release(): { promise: Promise<'finish' | 'abandon'>; settle: (how: 'finish' | 'abandon') => void } {
  let settle!: (how: 'finish' | 'abandon') => void;
  const promise = new Promise<'finish' | 'abandon'>((r) => (settle = r));
  return { promise, settle };
}

test('a run past its run timeout is resumed by the next: same child id, finished episodes not replayed', async () => {
  const d = double('resume');
  const hold = release();
  d.held = { uid: 'c', release: hold.promise };
  const first = await start('resume', { workflowRunTimeout: '6 seconds' });
  await until("task c's episodes are in flight", () => d.played.filter((id) => /\/c#/.test(id)).length === 2);
  assert.equal(d.played.length, 6, 'a and b finished, c in flight');
  await assert.rejects(first.result(), WorkflowFailedError);
  hold.settle('abandon');
  // The parent close policy ends the timed-out run's evaluation child (a server-side task, moments later).
  await until('the first evaluation child is closed', async () =>
    (await evaluationRuns('resume')).every((r) => r.status !== 'RUNNING'),
  );
  d.held = undefined;
  const playedBefore = d.played.length;

  const second = await (await start('resume')).result();
  const replayed = d.played.slice(playedBefore);
  assert.deepEqual(replayed.map((id) => id.split('/').at(-1)).sort(), ['c#0', 'c#1'], 'only the unfinished keys');
  assert.equal(second.step, 4);
  assert.doesNotMatch(second.label, /[0-9a-f]{8}-[0-9a-f]{4}-/, 'no run id in the label');
  assert.match(second.label, /^scheduled-step4-/);

  const third = await (await start('resume')).result();
  assert.equal(d.played.length, playedBefore + 2, 'a re-run of a finished step plays nothing');
  assert.equal(third.label, second.label);
  const ids = new Set((await evaluationRuns('resume')).map((r) => r.workflowId));
  assert.deepEqual([...ids], [`resume/eval-${second.label}`], 'every run used the one evaluation child id');
  assert.ok(d.played.every((id) => id.startsWith(`resume/eval-${second.label}/`)));
});

test('a second run while the first evaluation still runs waits for it: no second copy, no episode twice', async () => {
  const d = double('overlap');
  const hold = release();
  d.held = { uid: 'c', release: hold.promise };
  const first = await start('overlap');
  await until("task c's episodes are in flight", () => d.played.filter((id) => /\/c#/.test(id)).length === 2);
  const second = await start('overlap');
  try {
    await until('the second run found the evaluation running', async () => {
      const events = (await second.fetchHistory()).events ?? [];
      return events.some((e) => e.startChildWorkflowExecutionFailedEventAttributes);
    });
    assert.equal((await evaluationRuns('overlap')).filter((r) => r.status === 'RUNNING').length, 1);
  } finally {
    hold.settle('finish');
  }
  const [a, b] = await Promise.all([first.result(), second.result()]);
  assert.equal(b.label, a.label);
  assert.equal(new Set(d.played).size, d.played.length, 'no episode played twice');
  assert.equal(d.played.length, 6);
});

test('the evaluation policy server is its own (never the campaign learner) and is stopped after success', async () => {
  const d = double('stops');
  const result = await (await start('stops')).result();
  assert.deepEqual(d.servers, [`stops/eval-${result.label}`], 'named after the evaluation, not the campaign');
  assert.deepEqual(d.stopped, d.servers);
});

test('with no campaign to pause, the evaluation waits out an outage as a paused stage would', async () => {
  const result = await (await start('outage')).result();
  const started = (await env.client.workflow.getHandle(`outage/eval-${result.label}`).fetchHistory()).events?.[0];
  const payload = started?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data;
  const child = JSON.parse(Buffer.from(payload ?? []).toString('utf8')) as { outageWaits?: unknown };
  assert.deepEqual(child.outageWaits, { waits: 4, initialMs: 300_000, maxMs: 3_600_000 });
  assert.deepEqual(child.outageWaits, evaluationOutageWaits(config));
  const older = { ...config, recovery: undefined } as unknown as typeof config;
  assert.deepEqual(evaluationOutageWaits(older), child.outageWaits, 'a config recorded before `recovery`: defaults');
});

test('the evaluation policy server is stopped after a failure too', async () => {
  const d = double('stopfail');
  d.aggregateFails = true;
  await assert.rejects((await start('stopfail')).result(), WorkflowFailedError);
  assert.equal(d.servers.length, 1);
  assert.deepEqual(d.stopped, d.servers);
});

test('an external server needs no stop, and other tasks or repeats get a label of their own', async () => {
  const d = double('labels');
  const external = {
    ...input('labels'),
    config: {
      ...config,
      episode: { ...config.episode, policy: { ...config.episode.policy, base_url: 'http://x/v1' } },
    },
  };
  const run = async (args: ScheduledEvaluationInput) =>
    (
      await env.client.workflow.start(scheduledEvaluationWorkflow, {
        taskQueue: queue,
        workflowId: `labels-tick-${(runs += 1)}`,
        args: [args],
      })
    ).result();
  const base = await run(input('labels'));
  const fewer = await run({ ...input('labels'), uids: ['a'] });
  const more = await run({ ...input('labels'), repeats: 3 });
  assert.equal(new Set([base.label, fewer.label, more.label]).size, 3);
  assert.ok([fewer, more].every((r) => r.label.startsWith('scheduled-step4-')));
  d.servers.length = 0;
  d.stopped.length = 0;
  const served = await run(external);
  assert.equal(d.synced, 1, 'the external server was synced to step 4');
  assert.match(served.label, /^scheduled-step4-/);
  assert.notEqual(served.label, base.label, 'another policy config: another label');
  assert.deepEqual([d.servers, d.stopped], [[], []], 'no embedded server started or stopped');
});

test('an infrastructure failure past the retries pauses the evaluation; a resume runs it again', async () => {
  const d = double('pauses');
  d.aggregateOutages = 1;
  const handle = await start('pauses');
  await until(
    'the evaluation is paused',
    async () => (await handle.describe()).typedSearchAttributes.get(pausedKey) === true,
  );
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  const text = metadata.currentDetails ?? '';
  assert.match(text, /paused: evaluation .* failed for an infrastructure reason: .*ECONNREFUSED/, text);
  assert.match(text, /tbt campaign resume/);
  assert.match(await handle.executeUpdate(resumeUpdate), /^resumed: evaluation /);
  const result = await handle.result();
  assert.equal(result.aggregate, `eval-${result.label}.json`);
  assert.equal((await handle.describe()).typedSearchAttributes.get(pausedKey), false);
  assert.equal(d.played.length, 6, 'the episodes of the failed run were reused, not played again');
  await assert.rejects(handle.executeUpdate(resumeUpdate), /not paused|completed|not found/i);
});

test('tbt eval run prints the progress of the evaluation child while it waits, each change once', async () => {
  const d = double('progress');
  const hold = release();
  d.held = { uid: 'c', release: hold.promise };
  const handle = await start('progress');
  const lines: string[] = [];
  const stop = followEvaluation(env.client, handle, (line) => lines.push(line), 200);
  try {
    await until('a progress line with keys', () => lines.some((l) => /\d+\/6 keys done/.test(l)));
  } finally {
    hold.settle('finish');
  }
  await handle.result();
  stop();
  assert.match(lines[0]!, /^\[\d\d:\d\d:\d\d\] /);
  assert.equal(new Set(lines.map((l) => l.slice(11))).size, lines.length, 'a line only when it changed');
});

test('an evaluation of an external server the campaign is training on is refused, naming it', async () => {
  const d = double('shared');
  const external = {
    ...input('shared'),
    config: {
      ...config,
      episode: { ...config.episode, policy: { ...config.episode.policy, base_url: 'http://x/v1' } },
    },
  };
  const handle = await env.client.workflow.start(scheduledEvaluationWorkflow, {
    taskQueue: queue,
    workflowId: `shared-tick-${(runs += 1)}`,
    args: [external],
  });
  const err = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError, String(err));
  assert.match(String(err.cause?.message), /campaign shared is training on http:\/\/x\/v1: .*labelled step 4/);
  assert.equal(d.synced, 0, 'nothing was synced');
  assert.deepEqual(d.played, [], 'nothing was played');
});

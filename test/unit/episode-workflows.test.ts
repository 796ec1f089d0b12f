import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, WorkflowFailedError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import type { StepRecord } from '../../activities/campaign-activities.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { familyStepTaskOrder, stepTaskOrder, taskFamily } from '../../core/seeded-choice.ts';
import { campaignWorkflow, resumeSignal, statusQuery, stopAfterStepSignal } from '../../workflows/campaign-workflow.ts';
import { evaluationWorkflow } from '../../workflows/evaluation-workflow.ts';
import { shardRanges } from '../../workflows/keyed-episodes.ts';
import { probeWorkflow } from '../../workflows/probe-workflow.ts';
import { trainingStepWorkflow, type TrainingStepInput } from '../../workflows/training-step-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';
import { toTemporalFailure } from '../../activities/temporal-failure.ts';
import { LearnerHttpError, rethrowRefusalAsBadInput } from '../../learner-control/learner-client.ts';
import path from 'node:path';

/**
 * The workflows' branches on a real Temporal dev server with mocked activities: every training-step branch
 * (refill cap, lost group, replacements exhausted, both fallbacks, all groups lost), the concurrency bound held
 * exactly, shard boundaries, re-run backoff, and a failed or cancelled campaign releasing its learner.
 */

const queue = 'unit-workflows';
type Outcome = 'success' | 'agent_failure' | 'infrastructure_error';

/** Per test (keyed by campaign id): how each episode ends, how long it takes, and what ran. */
interface Scenario {
  outcome: (input: EpisodeActivityInput) => Outcome;
  delayMs?: number | ((input: EpisodeActivityInput) => number);
  inFlight: number;
  maxInFlight: number;
  runs: { id: string; start: number; end: number }[];
  calls: { name: string; input: unknown }[];
  hang?: boolean;
}
const scenarios = new Map<string, Scenario>();
function scenario(campaignId: string, outcome: Scenario['outcome'], delayMs: Scenario['delayMs'] = 20): Scenario {
  const s: Scenario = { outcome, delayMs, inFlight: 0, maxInFlight: 0, runs: [], calls: [] };
  scenarios.set(campaignId, s);
  return s;
}
const record = (campaignId: string, name: string, input: unknown) =>
  scenarios.get(campaignId)?.calls.push({ name, input });

/** What the train-step activity throws for a learner's error answer. */
function rethrowsAs(err: unknown): unknown {
  try {
    return rethrowRefusalAsBadInput(err);
  } catch (mapped) {
    return mapped;
  }
}

const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const s = scenarios.get(input.campaign!)!;
    s.inFlight += 1;
    s.maxInFlight = Math.max(s.maxInFlight, s.inFlight);
    const start = Date.now();
    try {
      if (s.hang) await Context.current().sleep(60_000);
      await delay(typeof s.delayMs === 'function' ? s.delayMs(input) : (s.delayMs ?? 20));
    } finally {
      s.inFlight -= 1;
    }
    s.runs.push({ id: input.episodeId, start, end: Date.now() });
    const outcome = s.outcome(input);
    return {
      id: input.episodeId,
      outcome,
      reward: outcome === 'success' ? 1 : 0,
      finishReason: outcome === 'infrastructure_error' ? 'infrastructure_error' : 'done',
      policyTokens: 0,
    };
  },
  async aggregateEvaluation(input: { campaignId: string }) {
    record(input.campaignId, 'aggregateEvaluation', input);
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  async selectPool(input: { campaignId: string }) {
    record(input.campaignId, 'selectPool', input);
    return { pool: ['a'], bands: { medium: 1 }, aggregates: 'aggregates.jsonl' };
  },
  async recordStep(input: StepRecord) {
    record(input.campaignId, 'recordStep', input);
  },
  async trainStep(input: { campaignId: string; stepId: number; items: unknown[] }) {
    record(input.campaignId, 'trainStep', input);
    // Campaigns named diskfull-...: step 1's first save does not fit on the checkpoint volume (the learner's 507).
    const attempts = scenarios.get(input.campaignId)?.calls.filter((c) => c.name === 'trainStep').length ?? 0;
    if (input.campaignId.startsWith('diskfull-') && input.stepId === 1 && attempts === 1)
      throw toTemporalFailure(rethrowsAs(new LearnerHttpError(507, 'disk_full', 'learner /step: HTTP 507: full')));
    // Campaigns named nonfinite-<k>-...: the learner skips every update from step k on as non-finite.
    const from = /^nonfinite-(\d+)-/.exec(input.campaignId)?.[1];
    const skipped = from !== undefined && input.stepId >= Number(from);
    const metrics = skipped ? { loss: 0, skipped: true, non_finite: true } : { loss: 0.5 };
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics };
  },
  async exportWeights(input: { campaignId: string; stepId: number }) {
    return { path: `/weights/${input.campaignId}/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [] };
  },
  async ensurePolicyWeights() {},
  async ingestCandidates(input: { campaignId: string }) {
    record(input.campaignId, 'ingestCandidates', input);
    if (input.campaignId.startsWith('bad-'))
      throw ApplicationFailure.nonRetryable('suite has problems: tasks.yaml:3: field uid: missing', 'BadInputError');
    return { uids: ['t1', 't2'], excluded: 0, evaluationUids: ['t1', 't2'] };
  },
  async startLearner(input: { campaignId: string }) {
    record(input.campaignId, 'startLearner', input);
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async writeManifest(input: { campaignId: string; manifest: Record<string, unknown> }) {
    record(input.campaignId, 'writeManifest', input);
    return `/manifest/${input.campaignId}.json`;
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages(input: { policy: { base_url: string } }) {
    // The rollout worker asks the server the campaign will use: the embedded one's address, not 'embedded'.
    return { system_messages: input.policy.base_url === 'http://policy/v1' ? 'merged' : 'unasked-server' };
  },
  async stopLearner(input: { campaignId: string }) {
    record(input.campaignId, 'stopLearner', input);
  },
  async releaseLearner(input: { campaignId: string }) {
    record(input.campaignId, 'releaseLearner', input);
    return { released: true };
  },
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
};

/** The GPU worker of learner node 1 (its own task queue): it only starts that node's share of the learner. */
const node1Queue = `${queue}-node1`;
const node1Activities = {
  async startLearnerNode(input: { campaignId: string; nodeRank: number }) {
    record(input.campaignId, 'startLearnerNode', input);
    return { nodeRank: input.nodeRank, pid: 1, started: true };
  },
};

let env: TestWorkflowEnvironment;
let worker: Worker;
let node1Worker: Worker;
let running: Promise<unknown>;
before(async () => {
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  node1Worker = await mockedWorker(env, node1Queue, node1Activities);
  running = Promise.all([worker.run(), node1Worker.run()]);
});
after(async () => {
  worker?.shutdown();
  node1Worker?.shutdown();
  await running;
  await env?.teardown();
});

const fastBackoff = { initialMs: 50, maxMs: 400 };
const episode = {
  limits: { wall_clock_ms: 60_000 },
  policy: { sync_deadline_ms: 10_000 },
  sampling: { temperature: 1 },
} as never;

function keyedInput(campaignId: string, uids: string[], repeats: number, concurrency: number, shardSize: number) {
  return {
    uids,
    repeats,
    concurrency,
    shardSize,
    suiteDir: '/suite',
    episode,
    campaignId,
    rolloutQueue: queue,
    maxReruns: 3,
    infraBackoff: fastBackoff,
  };
}

test('shard ranges: every key in exactly one shard of at most shardSize keys', () => {
  assert.deepEqual(shardRanges(0, 5), []);
  assert.deepEqual(shardRanges(10, 5), [
    [0, 5],
    [5, 5],
  ]);
  assert.deepEqual(shardRanges(11, 5), [
    [0, 5],
    [5, 5],
    [10, 1],
  ]);
  assert.throws(() => shardRanges(3, 0), /shard size must be an integer >= 1/);
});

test('evaluation: shards cut at shardSize, every key runs once, most in flight == the bound', async () => {
  const s = scenario('eval-bound', () => 'success', 60);
  const uids = Array.from({ length: 7 }, (_, i) => `task-${i}`);
  const result = await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'eval-bound/eval-x',
    args: [{ ...keyedInput('eval-bound', uids, 3, 4, 5), label: 'x' }],
  });
  assert.equal(result.episodes, 21);
  assert.equal(result.reruns, 0);
  assert.equal(s.maxInFlight, 4, 'most episodes in flight equals the configured bound');
  const ids = s.runs.map((r) => r.id).sort();
  const expected = uids.flatMap((u) => [0, 1, 2].map((r) => `eval-bound/eval-x/${u}#${r}`)).sort();
  assert.deepEqual(ids, expected, 'every uid#rep exactly once across shard boundaries');
  // 21 keys in shards of 5: shard-0 .. shard-4 (the last holds 1 key), no shard-5.
  for (let i = 0; i < 5; i++) await env.client.workflow.getHandle(`eval-bound/eval-x/shard-${i}`).describe();
  await assert.rejects(env.client.workflow.getHandle('eval-bound/eval-x/shard-5').describe());
  const last = await env.client.workflow.getHandle('eval-bound/eval-x/shard-4').result();
  assert.equal(last.keys, 1);
  const aggregate = s.calls.find((c) => c.name === 'aggregateEvaluation')!.input as Record<string, unknown>;
  assert.equal(aggregate.idPrefix, 'eval-bound/eval-x', 'aggregation reads Postgres by prefix');
  assert.equal(aggregate.episodeIds, undefined, 'no id list travels');
});

test('evaluation: shards are lanes of one bound: the next shard fills the slots a slow episode leaves', async () => {
  // 12 keys in shards of 4, bound 3; the first key of each shard takes 2 s, the others 20 ms. One after another,
  // each shard would wait for its slow key with two slots empty (at least 6 s); as lanes the slow keys overlap.
  const slow = (i: EpisodeActivityInput) => /task-(0|4|8)$/.test(i.taskUid);
  const s = scenario(
    'eval-lanes',
    () => 'success',
    (i) => (slow(i) ? 2000 : 20),
  );
  const uids = Array.from({ length: 12 }, (_, i) => `task-${i}`);
  const result = await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'eval-lanes/eval-x',
    args: [{ ...keyedInput('eval-lanes', uids, 1, 3, 4), label: 'x' }],
  });
  assert.equal(result.episodes, 12);
  assert.equal(s.maxInFlight, 3, 'the bound holds across the shards running at once');
  assert.deepEqual(s.runs.map((r) => r.id).sort(), uids.map((u) => `eval-lanes/eval-x/${u}#0`).sort());
  const slowRuns = s.runs.filter((r) => /task-(0|4|8)#/.test(r.id)).sort((a, b) => a.start - b.start);
  assert.ok(
    slowRuns[2]!.start < slowRuns[0]!.end,
    `the third shard's slow key started ${slowRuns[2]!.start - slowRuns[0]!.end} ms after the first one ended`,
  );
  for (let i = 0; i < 3; i++) await env.client.workflow.getHandle(`eval-lanes/eval-x/shard-${i}`).describe();
});

test('evaluation: a re-run waits an exponential backoff; a key past maxReruns fails the coverage gate', async () => {
  const s = scenario(
    'eval-rerun',
    (i) => (i.taskUid === 'flaky' && !i.episodeId.includes('~retry-2') ? 'infrastructure_error' : 'success'),
    5,
  );
  const backoff = { initialMs: 300, maxMs: 10_000 };
  const result = await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'eval-rerun/eval-x',
    args: [{ ...keyedInput('eval-rerun', ['flaky', 'ok'], 1, 2, 10), infraBackoff: backoff, label: 'x' }],
  });
  assert.equal(result.episodes, 4);
  assert.equal(result.reruns, 2);
  const flaky = s.runs.filter((r) => r.id.includes('flaky')).sort((a, b) => a.start - b.start);
  assert.deepEqual(
    flaky.map((r) => r.id),
    ['eval-rerun/eval-x/flaky#0', 'eval-rerun/eval-x/flaky#0~retry-1', 'eval-rerun/eval-x/flaky#0~retry-2'],
  );
  assert.ok(flaky[1]!.start - flaky[0]!.end >= 300, `first re-run waited ${flaky[1]!.start - flaky[0]!.end} ms`);
  assert.ok(flaky[2]!.start - flaky[1]!.end >= 600, `second re-run waited ${flaky[2]!.start - flaky[1]!.end} ms`);

  scenario('eval-gate', (i) => (i.taskUid === 'dead' ? 'infrastructure_error' : 'success'), 5);
  const failed = env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'eval-gate/eval-x',
    args: [{ ...keyedInput('eval-gate', ['dead', 'ok'], 2, 2, 10), label: 'x' }],
  });
  await assert.rejects(failed, (err: unknown) => {
    assert.ok(err instanceof WorkflowFailedError);
    const cause = err.cause as ApplicationFailure;
    assert.equal(cause.type, 'CoverageGate');
    assert.match(cause.message, /2 of 4 keys still end in infrastructure errors after 3 re-runs/);
    return true;
  });
  assert.equal(scenarios.get('eval-gate')!.runs.filter((r) => r.id.includes('dead')).length, 8, '2 keys x (1 + 3)');
});

test('evaluation outside a campaign waits out an outage: the keys run again after a wait, full coverage', async () => {
  // The policy endpoint is "down" for the first 6 plays of key down#0 (1 + 3 re-runs, then 2 more after a wait).
  let plays = 0;
  const s = scenario(
    'eval-outage',
    (i) => (i.taskUid === 'down' && ++plays <= 6 ? 'infrastructure_error' : 'success'),
    5,
  );
  const result = await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'eval-outage/eval-x',
    args: [
      {
        ...keyedInput('eval-outage', ['down', 'ok'], 1, 2, 10),
        label: 'x',
        outageWaits: { waits: 2, initialMs: 300, maxMs: 300 },
      },
    ],
  });
  assert.equal(result.aggregate, 'eval.json', 'the coverage gate passed and the evaluation was aggregated');
  const down = s.runs.filter((r) => r.id.includes('down')).sort((a, b) => a.start - b.start);
  // Round 1: #0 and 3 re-runs, all down; wait; round 2: the same ids again, from #0: the 6th play is the last down.
  assert.deepEqual(
    down.map((r) => r.id.replace('eval-outage/eval-x/', '')),
    ['down#0', 'down#0~retry-1', 'down#0~retry-2', 'down#0~retry-3', 'down#0', 'down#0~retry-1', 'down#0~retry-2'],
  );
  assert.ok(down[4]!.start - down[3]!.end >= 300, `waited ${down[4]!.start - down[3]!.end} ms before round 2`);
});

test('probe: sharded, selection by id prefix', async () => {
  const s = scenario('probe-shards', () => 'success', 5);
  const result = await env.client.workflow.execute(probeWorkflow, {
    taskQueue: queue,
    workflowId: 'probe-shards/probe',
    args: [{ ...keyedInput('probe-shards', ['a', 'b', 'c'], 4, 3, 5), minCleanRuns: 3, retainBands: ['medium'] }],
  });
  assert.equal(result.episodes, 12);
  assert.equal(s.maxInFlight, 3);
  const select = s.calls.find((c) => c.name === 'selectPool')!.input as Record<string, unknown>;
  assert.equal(select.idPrefix, 'probe-shards/probe');
  assert.equal(select.probeEpisodeIds, undefined);
});

test('probe: waits out an outage before selecting; a probe with every key down fails its coverage gate', async () => {
  // The endpoint is down for the first 8 plays: round 1 (2 keys x (1 + 3 re-runs)); both keys come back after the wait.
  let plays = 0;
  const s = scenario('probe-outage', () => (++plays <= 8 ? 'infrastructure_error' : 'success'), 5);
  const outage = { waits: 1, initialMs: 200, maxMs: 200 };
  const input = { ...keyedInput('probe-outage', ['a', 'b'], 1, 1, 5), minCleanRuns: 1, retainBands: ['medium'] };
  const result = await env.client.workflow.execute(probeWorkflow, {
    taskQueue: queue,
    workflowId: 'probe-outage/probe',
    args: [{ ...input, outageWaits: outage }],
  });
  assert.deepEqual(result.pool, ['a']);
  assert.equal(s.runs.length, 10, 'round 1: 2 keys x (1 + 3 re-runs); after the wait each key once more');
  assert.equal(s.calls.filter((c) => c.name === 'selectPool').length, 1);

  const dead = scenario('probe-dead', () => 'infrastructure_error', 5);
  const failed = env.client.workflow.execute(probeWorkflow, {
    taskQueue: queue,
    workflowId: 'probe-dead/probe',
    args: [{ ...keyedInput('probe-dead', ['a', 'b'], 1, 1, 5), minCleanRuns: 1, retainBands: ['medium'] }],
  });
  await assert.rejects(failed, (err: unknown) => {
    assert.ok(err instanceof WorkflowFailedError);
    const cause = err.cause as ApplicationFailure;
    assert.equal(cause.type, 'CoverageGate');
    assert.match(cause.message, /all 2 keys still end in infrastructure errors after 3 re-runs and 0 outage waits/);
    return true;
  });
  assert.equal(dead.calls.filter((c) => c.name === 'selectPool').length, 0, 'nothing selected from an outage');
});

// ---------------------------------------------------------------------------------------------------
// training step

const baseTraining: CampaignConfig['training'] = {
  steps: 1,
  groups_per_step: 1,
  group_size: 4,
  concurrency: 8,
  normalize_std: true,
  infra_refill_cap: 2,
  max_replacements: 1,
  max_staleness: 0,
  task_order: 'seeded',
  zero_variance_fallback: 'train_on_fewer',
  judge_mode: 'motivation',
};
type Kind = 'informative' | 'zero' | 'lost' | `flaky-${number}`;
/** Behaviour by task kind; rep = the `#<rep>` of the id. Informative groups alternate 1, 0, 1, 0 ... */
function stepOutcome(kinds: Record<string, Kind>) {
  return (i: EpisodeActivityInput): Outcome => {
    const kind = kinds[i.taskUid]!;
    const rep = i.repetition ?? 0;
    if (kind === 'lost') return 'infrastructure_error';
    if (kind === 'zero') return 'agent_failure';
    if (kind.startsWith('flaky-') && rep < Number(kind.slice(6))) return 'infrastructure_error';
    return rep % 2 === 0 ? 'success' : 'agent_failure';
  };
}
/** The pool, in the order the step will draw it, with the kinds given by position. */
function stepPool(
  campaignId: string,
  kinds: Kind[],
  pool = kinds.map((_, i) => `${campaignId}-task-${i}`),
): { pool: string[]; byUid: Record<string, Kind> } {
  const order = stepTaskOrder(pool, 7, 1);
  return { pool, byUid: Object.fromEntries(order.map((uid, i) => [uid, kinds[i]!])) };
}
async function runStep(
  campaignId: string,
  kinds: Kind[],
  training: Partial<CampaignConfig['training']>,
  delayMs = 10,
  extra: Partial<TrainingStepInput> = {},
) {
  const { pool, byUid } = stepPool(campaignId, kinds, extra.pool);
  const order = stepTaskOrder(pool, 7, 1);
  const s = scenario(campaignId, stepOutcome(byUid), delayMs);
  const input: TrainingStepInput = {
    campaignId,
    step: 1,
    pool,
    suiteDir: '/suite',
    episode,
    training: { ...baseTraining, ...training },
    learner: {} as never,
    policyServers: [],
    weightVersion: 0,
    seed: 7,
    rolloutQueue: queue,
    gpuQueue: queue,
    infraBackoff: fastBackoff,
    ...extra,
  };
  const run = env.client.workflow.execute(trainingStepWorkflow, {
    taskQueue: queue,
    workflowId: `${campaignId}/step-1`,
    args: [input],
  });
  return { run, s, order };
}
const ranOf = (s: Scenario, uid: string) =>
  s.runs
    .map((r) => r.id)
    .filter((id) => id.includes(`/${uid}#`))
    .map((id) => id.slice(id.indexOf('#')))
    .sort();

test('training step: most episodes in flight == training.concurrency across groups', async () => {
  const { run, s } = await runStep(
    'step-bound',
    ['informative', 'informative', 'informative'],
    {
      groups_per_step: 3,
      concurrency: 3,
    },
    80,
  );
  const rec = await run;
  assert.equal(rec.informativeGroups, 3);
  assert.equal(s.maxInFlight, 3, 'the bound holds: never more, and reached');
});

test(
  "training step: a multi-node learner's other nodes are started on their own GPU queue before the " + 'update',
  async () => {
    const { run, s } = await runStep('step-nodes', ['informative'], { groups_per_step: 1 }, 10, {
      learner: { nodes: 2, gpus_per_node: 1 } as never,
      gpuNodeQueues: [queue, node1Queue],
    });
    await run;
    const names = s.calls.map((c) => c.name);
    assert.ok(names.includes('startLearnerNode'), names.join(','));
    assert.ok(names.indexOf('startLearnerNode') < names.indexOf('trainStep'), 'node 1 runs before node 0 trains');
    assert.equal((s.calls.find((c) => c.name === 'startLearnerNode')!.input as { nodeRank: number }).nodeRank, 1);
    assert.equal(names.filter((n) => n === 'startLearnerNode').length, 1, 'node 0 is not started as another node');
  },
);

test('training step: task_order by_family trains one task per family where the seeded order repeats', async () => {
  const pool = ['a', 'b', 'c'].flatMap((f) => [0, 1, 2, 3].map((i) => `step-family/fam${f}-${i}`));
  const kinds = pool.map((): Kind => 'informative');
  const seeded = stepTaskOrder(pool, 7, 1).slice(0, 3).map(taskFamily);
  assert.ok(new Set(seeded).size < 3, `precondition: the seeded order repeats a family (${seeded.join(', ')})`);
  const { run } = await runStep('step-family', kinds, { groups_per_step: 3, task_order: 'by_family' }, 10, { pool });
  const rec = await run;
  assert.deepEqual(
    rec.groups.map((g) => g.uid),
    familyStepTaskOrder(pool, 7, 1, 3).slice(0, 3),
  );
  assert.equal(new Set(rec.groups.map((g) => taskFamily(g.uid))).size, 3);
});

test('training step: refill replaces lost episodes, never past infra_refill_cap', async () => {
  const { run, s, order } = await runStep('step-refill', ['flaky-2'], { infra_refill_cap: 2 });
  const rec = await run;
  assert.equal(rec.lostGroups, 0);
  assert.equal(rec.infraErrors, 2);
  assert.deepEqual(ranOf(s, order[0]!), ['#0', '#1', '#2', '#3', '#4', '#5']);
  assert.deepEqual(
    rec.groups[0]!.episodeIds.map((id) => id.slice(id.indexOf('#'))),
    ['#2', '#3', '#4', '#5'],
    'infrastructure errors never reach the batch',
  );
  assert.equal(rec.leakedInfraEpisodes, 0);
});

test('training step: a group still short after the cap is lost and replaced by a fresh task', async () => {
  const { run, s, order } = await runStep('step-lost', ['flaky-3', 'informative'], { infra_refill_cap: 2 });
  const rec = await run;
  assert.equal(rec.lostGroups, 1);
  assert.equal(rec.replacements, 1);
  assert.deepEqual(ranOf(s, order[0]!), ['#0', '#1', '#2', '#3', '#4', '#5'], 'cap of 2 refills held');
  assert.deepEqual(
    rec.groups.map((g) => g.uid),
    [order[1]],
  );
  assert.equal(rec.fallback, null);
});

test('training step: replacements exhausted -> train_on_fewer trains on the informative groups only', async () => {
  const { run, s, order } = await runStep('step-fewer', ['informative', 'zero', 'zero', 'informative'], {
    groups_per_step: 2,
    max_replacements: 1,
    zero_variance_fallback: 'train_on_fewer',
  });
  const rec = await run;
  assert.equal(rec.fallback, 'train_on_fewer');
  assert.equal(rec.replacements, 1);
  assert.equal(rec.zeroVarianceGroups, 2);
  assert.deepEqual(
    rec.groups.map((g) => g.uid),
    [order[0]],
  );
  assert.deepEqual(ranOf(s, order[3]!), [], 'no task past max_replacements is drawn');
  const train = s.calls.find((c) => c.name === 'trainStep')!.input as { items: unknown[] };
  assert.equal(train.items.length, 4);
});

test('training step: replacements exhausted -> keep_zero_variance fills up with zero-variance groups', async () => {
  const { run, s, order } = await runStep('step-keep', ['informative', 'zero', 'zero', 'informative'], {
    groups_per_step: 2,
    max_replacements: 1,
    zero_variance_fallback: 'keep_zero_variance',
  });
  const rec = await run;
  assert.equal(rec.fallback, 'keep_zero_variance');
  assert.deepEqual(
    rec.groups.map((g) => g.uid),
    [order[0], order[1]],
  );
  const train = s.calls.find((c) => c.name === 'trainStep')!.input as { items: { advantage: number }[] };
  assert.equal(train.items.length, 8);
  assert.deepEqual(
    train.items.slice(4).map((i) => i.advantage),
    [0, 0, 0, 0],
  );
});

test(
  'training step: every group lost -> retries with backoff and fresh ids, then ' + 'StepLostToInfrastructure',
  async () => {
    const { run, s } = await runStep('step-all-lost', ['lost', 'lost'], { infra_refill_cap: 0, max_replacements: 0 });
    await assert.rejects(run, (err: unknown) => {
      assert.ok(err instanceof WorkflowFailedError);
      assert.equal((err.cause as ApplicationFailure).type, 'StepLostToInfrastructure');
      return true;
    });
    // 1 group x 4 episodes, then 3 retries of the step with ids ~retry-1..3.
    assert.equal(s.runs.length, 16);
    assert.equal(s.runs.filter((r) => r.id.endsWith('~retry-3')).length, 4);
    assert.equal(s.calls.filter((c) => c.name === 'trainStep').length, 0, 'no update on an empty batch');
  },
);

// ---------------------------------------------------------------------------------------------------
// campaign cleanup

const campaignConfig = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
function campaignArgs(campaignId: string) {
  return [
    {
      campaignId,
      config: campaignConfig,
      suiteDir: '/suite',
      queues: { rollout: queue, gpu: queue },
    },
  ] as const;
}

test('campaign: a failed campaign releases its learner and policy servers', async () => {
  const s = scenario('bad-campaign', () => 'success');
  await assert.rejects(
    env.client.workflow.execute(campaignWorkflow, {
      taskQueue: queue,
      workflowId: 'bad-campaign',
      args: campaignArgs('bad-campaign'),
    }),
    WorkflowFailedError,
  );
  assert.deepEqual(
    s.calls.map((c) => c.name),
    ['ingestCandidates', 'stopLearner'],
  );
});

test('campaign: a cancelled campaign releases its learner and policy servers', async () => {
  const s = scenario('cancelled-campaign', () => 'success');
  s.hang = true;
  const handle = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: 'cancelled-campaign',
    args: campaignArgs('cancelled-campaign'),
  });
  while (s.inFlight === 0) await delay(50); // the probe's episodes are running
  await handle.cancel();
  await assert.rejects(handle.result(), WorkflowFailedError);
  assert.equal((await handle.describe()).status.name, 'CANCELLED');
  assert.deepEqual(
    s.calls.map((c) => c.name),
    ['ingestCandidates', 'startLearner', 'writeManifest', 'releaseLearner', 'stopLearner'],
  );
});

test('campaign: the learner is released while the campaign probes and evaluates, unless kept', async () => {
  const lifecycle = ['startLearner', 'releaseLearner', 'selectPool', 'aggregateEvaluation', 'trainStep', 'stopLearner'];
  const run = async (id: string, release: boolean) => {
    const config: CampaignConfig = {
      ...campaignConfig,
      learner: { ...campaignConfig.learner, release_outside_training: release },
      probe: { ...campaignConfig.probe, concurrency: 2 },
      training: { ...campaignConfig.training, steps: 1, groups_per_step: 1, group_size: 2, max_replacements: 0 },
      evaluation: { ...campaignConfig.evaluation, before_training: true, repeats: 1 },
    };
    const s = scenario(id, (i) => ((i.repetition ?? 0) % 2 === 0 ? 'success' : 'agent_failure'), 5);
    await env.client.workflow.execute(campaignWorkflow, {
      taskQueue: queue,
      workflowId: id,
      args: [{ ...campaignArgs(id)[0], config }],
    });
    return s.calls.map((c) => c.name).filter((n) => lifecycle.includes(n));
  };
  // Started at ingest (a learner that cannot start fails early), released for the probe and the evaluation
  // before; the training step starts it again (trainLearnerStep); released again for the evaluation after.
  assert.deepEqual(await run('release-campaign', true), [
    'startLearner',
    'releaseLearner',
    'selectPool',
    'aggregateEvaluation',
    'trainStep',
    'releaseLearner',
    'aggregateEvaluation',
    'stopLearner',
  ]);
  assert.deepEqual(await run('keep-campaign', false), [
    'startLearner',
    'selectPool',
    'aggregateEvaluation',
    'trainStep',
    'aggregateEvaluation',
    'stopLearner',
  ]);
});

test('campaign: the run manifest records how the policy template takes system messages', async () => {
  const s = scenario('manifest-campaign', () => 'success');
  s.hang = true;
  const handle = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: 'manifest-campaign',
    args: campaignArgs('manifest-campaign'),
  });
  while (s.inFlight === 0) await delay(50); // the manifest is written before the probe's episodes start
  await handle.cancel();
  await assert.rejects(handle.result(), WorkflowFailedError);
  const written = s.calls.find((c) => c.name === 'writeManifest')!.input as { manifest: Record<string, unknown> };
  assert.deepEqual(written.manifest.policy, { system_messages: 'merged' });
});

/** A campaign that only trains (steps of one 2-episode group), started and waited on until it pauses itself. */
async function trainingUntilPaused(id: string, steps: number) {
  const config: CampaignConfig = {
    ...campaignConfig,
    probe: { ...campaignConfig.probe, enabled: false },
    evaluation: { ...campaignConfig.evaluation, before_training: false },
    training: { ...campaignConfig.training, steps, groups_per_step: 1, group_size: 2, max_replacements: 0 },
  };
  const s = scenario(id, (i) => ((i.repetition ?? 0) % 2 === 0 ? 'success' : 'agent_failure'), 5);
  const handle = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ ...campaignArgs(id)[0], config }],
  });
  let status = await handle.query(statusQuery);
  while (!status.paused) {
    await delay(100);
    status = await handle.query(statusQuery);
  }
  return { s, handle, status };
}

test('campaign: a full checkpoint volume pauses it at once, no retry; the step saves after the resume', async () => {
  const { s, handle, status } = await trainingUntilPaused('diskfull-campaign', 2);
  assert.match(status.pauseReason ?? '', /training step 1 failed for an infrastructure reason: .*HTTP 507/);
  assert.equal(s.calls.filter((c) => c.name === 'trainStep').length, 1, 'paused on the first failure, no retry');
  await handle.signal(resumeSignal);
  const done = (await handle.result()) as { stage: string; step: number };
  assert.deepEqual([done.stage, done.step], ['done', 2]);
  assert.equal(s.calls.filter((c) => c.name === 'trainStep').length, 3, 'step 1 once more after the resume, then 2');
});

test('campaign: non-finite updates are skipped and go on; three in a row pause it with the reason', async () => {
  const { s, handle, status } = await trainingUntilPaused('nonfinite-2-campaign', 6);
  // Step 1 trained; steps 2, 3 and 4 were skipped as non-finite and recorded; the pause comes after the third.
  assert.equal(status.step, 4);
  assert.match(status.pauseReason ?? '', /3 training steps in a row \(up to step 4\) had a non-finite loss/);
  assert.equal(s.calls.filter((c) => c.name === 'recordStep').length, 4);
  assert.equal(s.calls.filter((c) => c.name === 'trainStep').length, 4, 'no step trained past the pause');
  await handle.signal(stopAfterStepSignal);
  await handle.result();
  assert.equal(s.calls.filter((c) => c.name === 'trainStep').length, 4);
});

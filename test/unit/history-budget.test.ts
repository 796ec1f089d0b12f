import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import {
  WorkflowFailedError,
  type ApplicationFailure,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { episodeInfrastructureFailure } from '../../activities/temporal-failure.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import type { EpisodeConfig } from '../../config/episode-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { evaluationWorkflow, type EvaluationInput } from '../../workflows/evaluation-workflow.ts';
import {
  defaultHistoryBudget,
  HistoryBudgetError,
  planStage,
  shardHistory,
  stageHistoryOwn,
  stageHistoryPerShard,
  temporalHistoryLimit,
  type HistorySize,
  type StageShape,
} from '../../workflows/history-budget.ts';
import { mockedWorker, startWorkflowTestEnv, workflowBundle } from '../helpers/workflow-test-env.ts';

/**
 * The history guard (workflows/history-budget.ts): at 100k keys, with re-runs and outage waits, the plan keeps
 * every workflow of the stage (each shard, each run of the stage's own workflow) within the budget, where the cut
 * before it (500-key shards, one run) does not; a stage no cut fits is refused. On a real dev server: the worst-case
 * estimate is at least the events and bytes a small stage records when every attempt fails, and a stage past its
 * budget continues as new between shards, covers every key once, and replays.
 */

const within = (h: HistorySize, budget: HistorySize) => h.events <= budget.events && h.bytes <= budget.bytes;

/** A stage the size of the review's concern: 5,000 tasks x 20 repeats, 3 re-runs, 4 outage waits (`tbt eval run`). */
function shape100k(overrides: Partial<StageShape> = {}): StageShape {
  return {
    keys: 100_000,
    concurrency: 8,
    maxReruns: 3,
    outageWaits: 4,
    shardSize: 500,
    episodeBytes: 1_000,
    // 5,000 uids of about 24 characters as JSON, and the rest of the input.
    inputBytes: 5_000 * 24 + 2_000,
    ...overrides,
  };
}

/** Every workflow of the planned stage within the budget, at worst, every key covered. */
function assertPlanFits(shape: StageShape) {
  const plan = planStage(shape);
  const budget = plan.budget;
  const label = `${shape.keys} keys, bound ${shape.concurrency}, ${shape.outageWaits} waits`;
  assert.ok(plan.shards * plan.shardSize >= shape.keys, `${label}: every key in a shard`);
  assert.ok(plan.shardSize <= shape.shardSize, `${label}: never a larger shard than the config allows`);
  // The largest shard, and each run of the stage's workflow with as many shard starts as it may make.
  assert.ok(within(shardHistory(shape, plan.shardSize), budget), `${label}: shard ${JSON.stringify(plan.shard)}`);
  const perShard = stageHistoryPerShard(shape, plan.shardSize);
  const own = stageHistoryOwn(shape);
  const run = {
    events: own.events + plan.shardStartsPerRun * perShard.events,
    bytes: own.bytes + plan.shardStartsPerRun * perShard.bytes,
  };
  assert.ok(within(run, budget), `${label}: a run of the stage ${JSON.stringify(run)}`);
  // Every pass's shard starts, spread over the runs.
  assert.ok(plan.runs * plan.shardStartsPerRun >= plan.shards * (1 + shape.outageWaits), `${label}: runs`);
  assert.ok(budget.events <= temporalHistoryLimit.events / 5 && budget.bytes <= temporalHistoryLimit.bytes / 5);
  return plan;
}

test('at 100k keys with re-runs and outage waits every workflow of the stage stays within the budget', () => {
  const plan = assertPlanFits(shape100k());
  assert.deepEqual(plan.budget, defaultHistoryBudget);
  assert.ok(plan.shardSize < 500 && plan.runs > 1, JSON.stringify(plan.cuts));
  assert.match(plan.cuts.join('; '), /shards of \d+ keys instead of 500; continues as new after every \d+ shards/);
  // The same with the reference's bound (128), a bound just under a give-back batch of 2 (63: most hand-overs), a
  // campaign's evaluation (no waits), a probe (2 waits), 100k uids of one repeat, and no re-runs.
  assertPlanFits(shape100k({ concurrency: 128 }));
  assertPlanFits(shape100k({ concurrency: 63 }));
  assertPlanFits(shape100k({ outageWaits: 0 }));
  assertPlanFits(shape100k({ outageWaits: 2, concurrency: 32, maxReruns: 3 }));
  assertPlanFits(shape100k({ inputBytes: 100_000 * 24 + 2_000 }));
  assertPlanFits(shape100k({ maxReruns: 0 }));
});

test("today's cut at 100k keys (500-key shards, every shard start in one run) outgrows the budget", () => {
  // Why the guard exists: the shards and the stage the planner replaced, estimated by the same counts.
  const shape = shape100k();
  const shard = shardHistory(shape, 500);
  assert.ok(!within(shard, defaultHistoryBudget), `a 500-key shard at worst: ${JSON.stringify(shard)}`);
  const starts = Math.ceil(shape.keys / 500) * (1 + shape.outageWaits);
  const stageEvents = stageHistoryOwn(shape).events + starts * stageHistoryPerShard(shape, 500).events;
  assert.ok(stageEvents > temporalHistoryLimit.events, `the stage in one run: ${stageEvents} events`);
});

test('a stage no cut fits is refused, naming its key count and the limit', () => {
  // 2.5 million uids: the stage's input alone (twice: the aggregation carries it too) outgrows a history.
  assert.throws(
    () => planStage(shape100k({ keys: 2_500_000, inputBytes: 2_500_000 * 24 })),
    (err: unknown) => {
      assert.ok(err instanceof HistoryBudgetError);
      assert.match(err.message, /a stage of 2500000 keys .* history budget of 10240 events, 10\.0 MiB per workflow/);
      assert.match(err.message, /Temporal's limit: 51200 events, 50\.0 MiB/);
      return true;
    },
  );
  // So many re-runs that one key outgrows a shard's history.
  assert.throws(() => planStage(shape100k({ maxReruns: 1_000 })), /a shard of one key alone records up to/);
  assert.throws(() => planStage(shape100k({ concurrency: 0 })), /concurrency must be an integer >= 1/);
});

test('the estimate grows with the keys and the re-runs; a small stage is not cut', () => {
  const shape = shape100k();
  for (let keys = 1; keys < 600; keys += 37) {
    assert.ok(shardHistory(shape, keys + 1).events > shardHistory(shape, keys).events);
    assert.ok(shardHistory(shape, keys + 1).bytes > shardHistory(shape, keys).bytes);
  }
  assert.ok(shardHistory({ ...shape, maxReruns: 4 }, 100).events > shardHistory(shape, 100).events);
  // A clean 500-key shard (no re-run) is the ~3,000 events the docs quote: the estimate stays within it.
  assert.ok(shardHistory({ ...shape, maxReruns: 0 }, 500).events <= 3_100);
  const small = planStage({ ...shape, keys: 21, shardSize: 5, outageWaits: 0 });
  assert.deepEqual([small.shardSize, small.shards, small.runs, small.cuts], [5, 5, 1, []]);
  const none = planStage({ ...shape, keys: 0 });
  assert.deepEqual([none.shards, none.runs], [0, 1]);
});

// ---------------------------------------------------------------------------------------------------
// On a dev server: the estimate against real histories, and the cut at work.

const queue = 'unit-history-budget';
/** Per campaign id: plays per key, keys that fail their first `failPlays` plays, and what ran. */
const scenarios = new Map<string, { failPlays: number; plays: Map<string, number>; runs: string[] }>();

const activities = {
  async runEpisode(input: EpisodeActivityInput) {
    const s = scenarios.get(input.campaign!)!;
    await delay(5);
    s.runs.push(input.episodeId);
    const key = `${input.taskUid}#${input.repetition}`;
    const play = (s.plays.get(key) ?? 0) + 1;
    s.plays.set(key, play);
    const outcome = play <= s.failPlays ? 'infrastructure_error' : 'success';
    const summary = {
      id: input.episodeId,
      outcome,
      reward: outcome === 'success' ? 1 : 0,
      finishReason: outcome === 'success' ? 'done' : 'infrastructure_error',
      policyTokens: 0,
      ...(outcome === 'success' ? {} : { cause: `policy endpoint refused the connection: ${'x'.repeat(400)}` }),
    } as const;
    // As the real activity ends such an episode: a non-retryable failure carrying the stored summary.
    if (outcome !== 'success') throw episodeInfrastructureFailure(summary);
    return summary;
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
};

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<unknown>;
let episode: EpisodeConfig;
before(async () => {
  episode = (await loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'))).episode;
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  running = worker.run();
});
after(async () => {
  worker?.shutdown();
  await running;
  await env?.teardown();
});

function evaluationInput(campaignId: string, keys: number, extra: Partial<EvaluationInput>): EvaluationInput {
  return {
    label: 'x',
    uids: Array.from({ length: keys }, (_, i) => `task-${i}`),
    repeats: 1,
    suiteDir: '/suite',
    episode,
    campaignId,
    rolloutQueue: queue,
    concurrency: 2,
    shardSize: 2,
    maxReruns: 2,
    infraBackoff: { initialMs: 20, maxMs: 40 },
    ...extra,
  };
}

/** The shape the workflow plans with (outage-waits.ts), from its input. */
function shapeOf(input: EvaluationInput): StageShape {
  return {
    keys: input.uids.length * input.repeats,
    concurrency: input.concurrency,
    maxReruns: input.maxReruns,
    outageWaits: input.outageWaits?.waits ?? 0,
    shardSize: input.shardSize!,
    episodeBytes: JSON.stringify(input.episode).length,
    inputBytes: JSON.stringify(input).length + 100,
    ...(input.historyBudget ? { budget: input.historyBudget } : {}),
  };
}

interface RunHistory {
  runId: string;
  events: { eventType?: unknown; [k: string]: unknown }[];
  bytes: number;
}

async function runHistory(workflowId: string, runId: string): Promise<RunHistory> {
  const handle = env.client.workflow.getHandle(workflowId, runId);
  const [history, description] = await Promise.all([handle.fetchHistory(), handle.describe()]);
  return { runId, events: (history.events ?? []) as RunHistory['events'], bytes: description.historySize ?? 0 };
}

/** Every run of a workflow's continue-as-new chain, first to last. */
async function chainRuns(handle: WorkflowHandleWithFirstExecutionRunId): Promise<RunHistory[]> {
  const runs: RunHistory[] = [];
  for (let runId: string | undefined = handle.firstExecutionRunId; runId;) {
    const run = await runHistory(handle.workflowId, runId);
    runs.push(run);
    const last = run.events.at(-1) as {
      workflowExecutionContinuedAsNewEventAttributes?: { newExecutionRunId?: string };
    };
    runId = last.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
  }
  return runs;
}

/** The shard runs a stage run started: [workflow id, run id]. */
function shardRunsOf(run: RunHistory): [string, string][] {
  return run.events.flatMap((e) => {
    const started = (e as { childWorkflowExecutionStartedEventAttributes?: { workflowExecution?: object } })
      .childWorkflowExecutionStartedEventAttributes?.workflowExecution as
      { workflowId?: string; runId?: string } | undefined;
    return started?.workflowId && started.runId ? [[started.workflowId, started.runId] as [string, string]] : [];
  });
}

test('the estimate is at least what a small stage records when every attempt fails (events and bytes)', async () => {
  // 6 keys in 3 shards of 2, bound 2, 2 re-runs, 1 outage wait. Each key fails 5 plays: all 3 of the first pass, then
  // 2 in the second; its last re-run succeeds. So every shard run holds every re-run and its backoff: the worst case.
  scenarios.set('hb-worst', { failPlays: 5, plays: new Map(), runs: [] });
  const input = evaluationInput('hb-worst', 6, { outageWaits: { waits: 1, initialMs: 100, maxMs: 100 } });
  const handle = await env.client.workflow.start(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'hb-worst/eval-x',
    args: [input],
  });
  const result = await handle.result();
  // The result counts the last pass's episodes and every pass's re-runs: 3 attempts per key in each of 2 passes.
  assert.deepEqual([result.episodes, result.reruns], [6 * 3, 6 * 2 * 2]);
  const shape = shapeOf(input);
  const plan = planStage(shape);
  assert.deepEqual([plan.shardSize, plan.shards, plan.runs], [2, 3, 1]);
  const [stage, ...more] = await chainRuns(handle);
  assert.equal(more.length, 0, 'one run: the stage fits its budget');
  const shardRuns = await Promise.all(shardRunsOf(stage!).map(([id, run]) => runHistory(id, run)));
  assert.equal(shardRuns.length, 6, '3 shards in each of 2 passes');
  const shardEstimate = shardHistory(shape, 2);
  const stageEstimate = {
    events: stageHistoryOwn(shape).events + 6 * stageHistoryPerShard(shape, 2).events,
    bytes: stageHistoryOwn(shape).bytes + 6 * stageHistoryPerShard(shape, 2).bytes,
  };
  const report = [
    `stage: ${stage!.events.length} events, ${stage!.bytes} bytes; estimate ${JSON.stringify(stageEstimate)}`,
    ...shardRuns.map(
      (r) => `shard: ${r.events.length} events, ${r.bytes} bytes; estimate ${JSON.stringify(shardEstimate)}`,
    ),
  ].join('\n');
  console.log(report);
  for (const r of shardRuns) {
    assert.ok(r.events.length <= shardEstimate.events, report);
    assert.ok(r.bytes <= shardEstimate.bytes, report);
  }
  assert.ok(stage!.events.length <= stageEstimate.events, report);
  assert.ok(stage!.bytes <= stageEstimate.bytes, report);
  // Near the worst case, the estimate is not loose by much on the shards: every attempt is counted.
  const largest = Math.max(...shardRuns.map((r) => r.events.length));
  assert.ok(largest >= shardEstimate.events / 2, report);
});

test('a stage past its budget continues as new between shards, covers every key once, and replays', async () => {
  // 10 keys in shards of 2 (5 per pass), 1 re-run, 1 outage wait; a budget with room for 2 shard starts per run.
  scenarios.set('hb-cut', { failPlays: 2, plays: new Map(), runs: [] });
  const base = evaluationInput('hb-cut', 10, { maxReruns: 1, outageWaits: { waits: 1, initialMs: 50, maxMs: 50 } });
  const shape = shapeOf(base);
  const perShard = stageHistoryPerShard(shape, 2);
  const budget = { events: stageHistoryOwn(shape).events + 2 * perShard.events + 1, bytes: 10 * 1024 * 1024 };
  const input = { ...base, historyBudget: budget };
  const plan = planStage({ ...shape, budget });
  assert.deepEqual([plan.shardSize, plan.shards, plan.shardStartsPerRun], [2, 5, 2]);
  const handle = await env.client.workflow.start(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'hb-cut/eval-x',
    args: [input],
  });
  const result = await handle.result();
  // Pass 1: every key fails twice (both attempts); after the wait, pass 2: each key once more, a success.
  assert.deepEqual([result.episodes, result.reruns], [10, 10]);
  const s = scenarios.get('hb-cut')!;
  const ids = (suffix: string) => s.runs.filter((id) => id.endsWith(suffix));
  assert.equal(new Set(ids('#0')).size, 10, 'every key played in pass 1');
  assert.equal(ids('#0').length, 20, 'and again in pass 2, never twice in one pass');
  assert.equal(ids('~retry-1').length, 10);
  const runs = await chainRuns(handle);
  // 10 shard starts (5 per pass), 2 per run.
  assert.equal(runs.length, 5);
  for (const run of runs) {
    assert.ok(shardRunsOf(run).length <= 2, `a run started ${shardRunsOf(run).length} shards`);
    assert.ok(run.events.length <= budget.events, `a run of ${run.events.length} events`);
  }
  assert.deepEqual(
    runs.map((r) => shardRunsOf(r).map(([id]) => id.replace('hb-cut/eval-x/', ''))),
    [
      ['shard-0', 'shard-1'],
      ['shard-2', 'shard-3'],
      ['shard-4', 'shard-0'],
      ['shard-1', 'shard-2'],
      ['shard-3', 'shard-4'],
    ],
  );
  // Each run of the chain replays against today's code (the new path's commands are deterministic).
  const bundle = await workflowBundle();
  for (const run of runs) {
    const history = await env.client.workflow.getHandle(handle.workflowId, run.runId).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle }, history, `replay-${run.runId}`);
  }
});

test('a stage that cannot fit its budget fails as bad input before any shard starts', async () => {
  scenarios.set('hb-refused', { failPlays: 0, plays: new Map(), runs: [] });
  const input = evaluationInput('hb-refused', 4, { historyBudget: { events: 60, bytes: 10 * 1024 * 1024 } });
  const failed = env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'hb-refused/eval-x',
    args: [input],
  });
  await assert.rejects(failed, (err: unknown) => {
    assert.ok(err instanceof WorkflowFailedError);
    const cause = err.cause as ApplicationFailure;
    assert.equal(cause.type, 'BadInputError');
    assert.match(cause.message, /a stage of 4 keys .* cannot stay within the history budget of 60 events/);
    return true;
  });
  assert.deepEqual(scenarios.get('hb-refused')!.runs, [], 'no episode ran');
});

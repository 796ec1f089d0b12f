import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Context } from '@temporalio/activity';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import { replayCheck } from '../cli/commands/workflows-replay-check.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { repoRoot } from '../config/environment.ts';
import { writeWorkflowBundle } from '../infra/workflow-bundle.ts';
import { testTempDir } from './helpers/temp-dir.ts';
import { startWorkflowTestEnv, workflowBundle } from './helpers/workflow-test-env.ts';

/**
 * `tbt workflows replay-check` against a real dev server: an evaluation is left running (one episode never ends),
 * and the command replays it and its shard against today's bundle (passes) and against a bundle whose
 * evaluation starts with a timer it never had (must fail with a nondeterminism line and exit 1).
 */

const queue = 'replay-check';
let env: TestWorkflowEnvironment;
const dir = testTempDir('tbt-replay-check-');

/** Runs the command as the CLI would, its lines captured. */
async function check(args: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const io = { out: (t: string) => out.push(t), err: (t: string) => err.push(t) };
  const code = await replayCheck(['--task-queue', queue, ...args], { client: env.client, io });
  return { code, out, err };
}

before(async () => {
  env = await startWorkflowTestEnv();
  let slowStarted!: () => void;
  const started = new Promise<void>((resolve) => (slowStarted = resolve));
  const activities = {
    async runEpisode(input: EpisodeActivityInput) {
      if (input.taskUid === 'slow') {
        slowStarted();
        // Never ends on its own: the evaluation stays running once the worker is gone.
        await Context.current().cancelled;
      }
      return { id: input.episodeId, outcome: 'success', reward: 1, finishReason: 'done', policyTokens: 0 };
    },
    aggregateEvaluation: async () => ({ aggregate: 'eval.json', summary: 'ok' }),
  };
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: queue,
    workflowBundle: await workflowBundle(),
    activities,
  });
  const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const evaluation = (uids: string[], label: string) => ({
    uids,
    repeats: 1,
    suiteDir: '/suite',
    episode: config.episode,
    rolloutQueue: queue,
    maxReruns: 1,
    campaignId: 'rc',
    concurrency: 2,
    shardSize: 4,
    label,
  });
  await worker.runUntil(async () => {
    await env.client.workflow.execute('evaluationWorkflow', {
      taskQueue: queue,
      workflowId: 'rc/eval-done',
      args: [evaluation(['fast'], 'done')],
    });
    await env.client.workflow.start('evaluationWorkflow', {
      taskQueue: queue,
      workflowId: 'rc/eval-running',
      args: [evaluation(['fast', 'slow'], 'running')],
    });
    await started;
  });

  // Today's bundle, pre-built; and one whose evaluation workflow now starts with a timer: a change without patched().
  writeWorkflowBundle(path.join(dir, 'current'), (await workflowBundle()).code);
  const changed = path.join(dir, 'changed-workflows.ts');
  const modules = path.join(repoRoot, 'node_modules');
  fs.writeFileSync(
    changed,
    [
      `export * from '${path.join(repoRoot, 'workflows', 'index.ts')}';`,
      "import { sleep } from '@temporalio/workflow';",
      `import { evaluationWorkflow as today } from '${path.join(repoRoot, 'workflows', 'evaluation-workflow.ts')}';`,
      'export async function evaluationWorkflow(input: Parameters<typeof today>[0]) {',
      "  await sleep('1 second');",
      '  return today(input);',
      '}',
      '',
    ].join('\n'),
  );
  const changedBundle = await bundleWorkflowCode({
    workflowsPath: changed,
    // The entry lives outside the repository: the SDK's own modules resolve from ours.
    webpackConfigHook: (config) => ({
      ...config,
      resolve: { ...config.resolve, modules: [...(config.resolve?.modules ?? []), modules] },
    }),
    logger: { log() {}, info() {}, warn() {}, error: console.error, debug() {}, trace() {} },
  });
  fs.writeFileSync(path.join(dir, 'changed.js'), changedBundle.code);
});

after(async () => {
  await env?.teardown();
});

test("running workflows replay against today's bundle: one line each, a summary, exit 0", async () => {
  const { code, out, err } = await check(['--bundle', path.join(dir, 'current')]);
  assert.equal(code, 0, [...out, ...err].join('\n'));
  assert.match(out.join('\n'), /^ok +rc\/eval-running +evaluationWorkflow/m);
  assert.match(out.join('\n'), /^ok +rc\/eval-running\/shard-0 +episodeShardWorkflow/m);
  assert.doesNotMatch(out.join('\n'), /rc\/eval-done /, 'closed workflows only when asked');
  assert.match(out.at(-1)!, /^replay-check: bundle [0-9a-f]{16} workflows=2 ok=2 nondeterministic=0 errors=0$/);
});

test('a bundle that changed a running workflow without patched() fails: exit 1, the workflow named', async () => {
  const { code, out } = await check(['--bundle', path.join(dir, 'changed.js')]);
  assert.equal(code, 1, out.join('\n'));
  assert.match(out.join('\n'), /^NONDETERMINISTIC +rc\/eval-running +evaluationWorkflow .*Nondeterminism error/m);
  assert.match(out.join('\n'), /^ok +rc\/eval-running\/shard-0 /m);
  assert.match(out.at(-1)!, /workflows=2 ok=1 nondeterministic=1 errors=0$/);
});

test("--closed-hours adds recently closed workflows; the default bundle is this checkout's workflows", async () => {
  const { code, out } = await check(['--closed-hours', '1']);
  assert.equal(code, 0, out.join('\n'));
  assert.match(out.join('\n'), /^ok +rc\/eval-done +evaluationWorkflow/m);
  assert.match(out.join('\n'), /^ok +rc\/eval-done\/shard-0 +episodeShardWorkflow/m);
  assert.match(out.at(-1)!, /workflows=4 ok=4 nondeterministic=0 errors=0$/);
});

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { replayCheck } from '../cli/commands/workflows-replay-check.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { repoRoot } from '../config/environment.ts';
import { temporalBinary } from '../infra/temporal-dev-server.ts';
import { workerDeploymentOptions } from '../infra/worker-deployment.ts';
import { workflowBundleBuildId, writeWorkflowBundle } from '../infra/workflow-bundle.ts';
import { campaignWorkflow, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import { testTempDir } from './helpers/temp-dir.ts';
import { startWorkflowTestEnv, workflowBundle } from './helpers/workflow-test-env.ts';

/**
 * A deploy and its rollback under a running campaign (docs/operations.md, deploying): the orchestrator of build A
 * is joined by build B, whose campaign workflow has a patched change (a timer at the start of every run), made
 * current, then rolled back to A. Before each switch `tbt workflows replay-check` against the build about to take
 * over passes; the campaign finishes, every step on the build that was current when it started. Worker Versioning
 * (infra/worker-deployment.ts) pins each run and step to its build; activities are mocked.
 */

const queue = 'deploy-orchestrator';
const deploymentName = 'tbt-deploy-test';
const dir = testTempDir('tbt-deploy-test-');
/** Steps whose learner call waits until the test lets it finish. */
const held = new Set([1, 2]);
const reached = new Set<number>();
const activities = {
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
  async runEpisode(input: { episodeId: string; repetition?: number }) {
    const reward = (input.repetition ?? 0) % 2;
    return { id: input.episodeId, outcome: 'success', reward, finishReason: 'done', policyTokens: 0 };
  },
  async trainStep(input: { stepId: number }) {
    reached.add(input.stepId);
    while (held.has(input.stepId)) await delay(100);
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { stepId: number }) {
    return { path: `/weights/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [] };
  },
  async recordStep() {},
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
  async stopLearner() {},
  async releaseLearner() {
    return { released: true };
  },
};

let env: TestWorkflowEnvironment;
const workers: { worker: Worker; running: Promise<void> }[] = [];
const builds: Record<'A' | 'B', { code: string; buildId: string; dir: string }> = {} as never;

/** Build B: today's workflows, but every campaign run starts with a short timer, behind patched(). */
async function patchedBuild(): Promise<string> {
  const entry = path.join(dir, 'patched-workflows.ts');
  const today = path.join(repoRoot, 'workflows', 'campaign-workflow.ts');
  fs.writeFileSync(
    entry,
    [
      `export * from '${path.join(repoRoot, 'workflows', 'index.ts')}';`,
      "import { patched, sleep } from '@temporalio/workflow';",
      `import { campaignWorkflow as today } from '${today}';`,
      'export async function campaignWorkflow(input: Parameters<typeof today>[0]) {',
      "  if (patched('deploy-test-change')) await sleep('10 ms');",
      '  return today(input);',
      '}',
      '',
    ].join('\n'),
  );
  const modules = path.join(repoRoot, 'node_modules');
  const bundle = await bundleWorkflowCode({
    workflowsPath: entry,
    // The entry lives outside the repository: the SDK's own modules resolve from ours.
    webpackConfigHook: (config) => ({
      ...config,
      resolve: { ...config.resolve, modules: [...(config.resolve?.modules ?? []), modules] },
    }),
    logger: { log() {}, info() {}, warn() {}, error: console.error, debug() {}, trace() {} },
  });
  return bundle.code;
}

before(async () => {
  env = await startWorkflowTestEnv();
  for (const [name, code] of [
    ['A', (await workflowBundle()).code],
    ['B', await patchedBuild()],
  ] as const) {
    const buildDir = path.join(dir, name);
    writeWorkflowBundle(buildDir, code);
    builds[name] = { code, buildId: workflowBundleBuildId(code), dir: buildDir };
  }
});
after(async () => {
  for (const w of workers) w.worker.shutdown();
  await Promise.all(workers.map((w) => w.running));
  await env?.teardown();
});

async function startBuild(name: 'A' | 'B'): Promise<void> {
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: queue,
    workflowBundle: { code: builds[name].code },
    activities,
    ...workerDeploymentOptions({ TBT_WORKER_DEPLOYMENT_NAME: deploymentName }, builds[name].buildId),
  });
  workers.push({ worker, running: worker.run() });
}

/** What an operator runs to switch builds; retried while the server has not yet seen the build's poller. */
async function makeCurrent(name: 'A' | 'B'): Promise<void> {
  const args = ['worker', 'deployment', 'set-current-version', '--address', env.address, '--yes'];
  args.push('--deployment-name', deploymentName, '--build-id', builds[name].buildId);
  for (let i = 0; ; i++) {
    try {
      execFileSync(temporalBinary, args, { stdio: 'pipe' });
      return;
    } catch (err) {
      if (i > 100) throw err;
      await delay(200);
    }
  }
}

/** `tbt workflows replay-check --bundle <build>`: its exit code and summary line. */
async function replayCheckAgainst(name: 'A' | 'B'): Promise<{ code: number; out: string[] }> {
  const out: string[] = [];
  const io = { out: (t: string) => out.push(t), err: (t: string) => out.push(t) };
  const code = await replayCheck(['--task-queue', queue, '--bundle', builds[name].dir], { client: env.client, io });
  return { code, out };
}

async function buildOf(workflowId: string): Promise<string | undefined> {
  const info = (await env.client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo;
  return info?.versioningInfo?.deploymentVersion?.buildId ?? undefined;
}

async function until(what: string, done: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; !(await done()); i++) {
    assert.ok(i < 600, `timed out waiting for ${what}`);
    await delay(100);
  }
}

test('deploy a patched build under a running campaign, roll it back: replay checks pass, it finishes', async () => {
  const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const short = {
    ...config,
    probe: { ...config.probe, enabled: false },
    evaluation: { ...config.evaluation, before_training: false },
    training: { ...config.training, steps: 3, groups_per_step: 1, group_size: 2, max_replacements: 0 },
  };
  await startBuild('A');
  await makeCurrent('A');
  const id = 'deployed-campaign';
  await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ campaignId: id, config: short, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
  await until('step 1 on the learner', () => reached.has(1));

  // Deploy B: the check replays the running campaign and its step against B (patched: they replay).
  const toB = await replayCheckAgainst('B');
  assert.equal(toB.code, 0, toB.out.join('\n'));
  assert.match(toB.out.at(-1)!, /nondeterministic=0 errors=0/);
  await startBuild('B');
  await makeCurrent('B');
  held.delete(1);
  await until('step 2 on the learner', () => reached.has(2));
  assert.equal(await buildOf(id), builds.B.buildId, 'the campaign continued as new onto B');

  // Roll back to A: the run on B (it took the patched branch) is pinned to B and drains there; the check says so.
  const toA = await replayCheckAgainst('A');
  assert.equal(toA.code, 0, toA.out.join('\n'));
  assert.match(toA.out.join('\n'), /pinned deployed-campaign campaignWorkflow run .*: stays on build/);
  await makeCurrent('A');
  held.delete(2);
  const status = (await env.client.workflow.getHandle(id).result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.equal(status.step, 3);
  assert.equal(await buildOf(`${id}/step-1`), builds.A.buildId);
  assert.equal(await buildOf(`${id}/step-2`), builds.B.buildId);
  assert.equal(await buildOf(`${id}/step-3`), builds.A.buildId, 'after the rollback the next step ran on A');
  assert.equal(await buildOf(id), builds.A.buildId);
});

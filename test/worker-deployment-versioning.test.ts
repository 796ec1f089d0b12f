import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { repoRoot } from '../config/environment.ts';
import { temporalBinary } from '../infra/temporal-dev-server.ts';
import { workerDeploymentOptions } from '../infra/worker-deployment.ts';
import { campaignWorkflow, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import { startWorkflowTestEnv, workflowBundle } from './helpers/workflow-test-env.ts';

/**
 * Worker Versioning (infra/worker-deployment.ts) on a real dev server: a campaign runs on build A; build B is
 * deployed and made current in the middle of training step 1. The step (a child, pinned) finishes on A; the
 * campaign's next run, after its continue-as-new, starts on B and finishes there. Activities are mocked.
 */

const queue = 'versioning-orchestrator';
const deploymentName = 'tbt-versioning-test';
let releaseStep1 = false;
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
    while (input.stepId === 1 && !releaseStep1) await delay(100);
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
before(async () => {
  env = await startWorkflowTestEnv();
});
after(async () => {
  for (const w of workers) w.worker.shutdown();
  await Promise.all(workers.map((w) => w.running));
  await env?.teardown();
});

async function versionedWorker(buildId: string): Promise<void> {
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: queue,
    workflowBundle: await workflowBundle(),
    activities,
    ...workerDeploymentOptions({ TBT_WORKER_DEPLOYMENT_NAME: deploymentName }, buildId),
  });
  workers.push({ worker, running: worker.run() });
}

/** What an operator runs to make a build current; retried while the server has not seen the build's poller. */
async function setCurrentVersion(buildId: string): Promise<void> {
  const args = ['worker', 'deployment', 'set-current-version', '--address', env.address];
  args.push('--deployment-name', deploymentName, '--build-id', buildId, '--yes');
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

async function buildIdOf(workflowId: string): Promise<string | undefined> {
  const info = (await env.client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo;
  return info?.versioningInfo?.deploymentVersion?.buildId ?? undefined;
}

test('a campaign moves to the current build at its continue-as-new; its running step stays pinned', async () => {
  const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const short = {
    ...config,
    probe: { ...config.probe, enabled: false },
    evaluation: { ...config.evaluation, before_training: false },
    training: { ...config.training, steps: 2, groups_per_step: 1, group_size: 2, max_replacements: 0 },
  };
  await versionedWorker('A');
  await setCurrentVersion('A');
  const id = 'versioned-campaign';
  const handle = await env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: id,
    args: [{ campaignId: id, config: short, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
  const step1 = env.client.workflow.getHandle(`${id}/step-1`);
  for (let i = 0; (await step1.describe().catch(() => undefined)) === undefined; i++) {
    assert.ok(i < 300, 'step 1 never started');
    await delay(100);
  }
  assert.equal(await buildIdOf(id), 'A');
  await versionedWorker('B');
  await setCurrentVersion('B');
  releaseStep1 = true;
  const status = (await env.client.workflow.getHandle(id).result()) as CampaignStatus;
  assert.equal(status.stage, 'done');
  assert.equal(status.step, 2);
  assert.equal(await buildIdOf(`${id}/step-1`), 'A', 'the running step finished on the build it started on');
  assert.equal(await buildIdOf(`${id}/step-2`), 'B', 'the next step started on the current build');
  assert.equal(await buildIdOf(id), 'B', "the campaign's last run ran on the current build");
  assert.notEqual((await handle.describe()).runId, handle.firstExecutionRunId);
});

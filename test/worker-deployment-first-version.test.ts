import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { adoptFirstVersion } from '../infra/worker-deployment-first-version.ts';
import { workerDeploymentOptions } from '../infra/worker-deployment.ts';
import { smokeWorkflow } from '../workflows/smoke-workflow.ts';
import { startWorkflowTestEnv, workflowBundle } from './helpers/workflow-test-env.ts';

/**
 * `tbt workers up` with Worker Versioning on (infra/worker-deployment-first-version.ts), on a real dev server: a
 * versioned worker takes no task until its build is current; the first build is made current, a workflow then
 * runs on it; a second build is left for the operator to promote.
 */

const queue = 'first-version';
const deploymentName = 'tbt-first-version-test';
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
    activities: { recordSmokeCheck: async () => 7 },
    ...workerDeploymentOptions({ TBT_WORKER_DEPLOYMENT_NAME: deploymentName }, buildId),
  });
  workers.push({ worker, running: worker.run() });
}

test('the first build of a deployment is made current; a later one is left to the operator', async () => {
  const ns = env.namespace ?? 'default';
  const none = await adoptFirstVersion(env.client, ns, deploymentName, 1000);
  assert.equal(none.made, 'not-registered', none.text);

  await versionedWorker('A');
  const first = await adoptFirstVersion(env.client, ns, deploymentName);
  assert.deepEqual([first.made, first.buildId], ['current', 'A'], first.text);
  const result = await env.client.workflow.execute(smokeWorkflow, {
    taskQueue: queue,
    workflowId: 'first-version-smoke',
    args: ['first-version-smoke'],
    workflowExecutionTimeout: '30s',
  });
  assert.equal(result, 7, 'the workflow ran on the current build');
  const again = await adoptFirstVersion(env.client, ns, deploymentName);
  assert.deepEqual([again.made, again.buildId], ['already-current', 'A'], again.text);

  await versionedWorker('B');
  for (let i = 0; ; i++) {
    const later = await adoptFirstVersion(env.client, ns, deploymentName);
    if (later.made === 'other-current') {
      assert.equal(later.buildId, 'A', 'the current build stays A');
      assert.match(later.text, /other builds: B/);
      break;
    }
    assert.ok(i < 100, `build B never registered: ${later.text}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});

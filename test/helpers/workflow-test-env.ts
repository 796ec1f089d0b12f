import { TestWorkflowEnvironment } from '@temporalio/testing';
import {
  bundleWorkflowCode,
  DefaultLogger,
  makeTelemetryFilterString,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import path from 'node:path';
import { repoRoot } from '../../config/environment.ts';
import { temporalBinary } from '../../infra/temporal-dev-server.ts';
import { tbtSearchAttributeKeys } from '../../workflows/search-attribute-keys.ts';
import { campaignTrainingOn } from '../../activities/campaign-training-servers.ts';
import { createQueueWatchActivities } from '../../activities/queue-watch-activities.ts';

/**
 * Workflow tests with mocked activities (test/unit): a throw-away Temporal dev server started from the project's
 * own CLI binary (.tools; the SDK's time-skipping server would be downloaded at run time, which these machines
 * cannot), in memory, on a free port, with our search attributes registered. Activities are the test's own
 * functions; the workflow code is the real bundle.
 */

// Mocked activities fail on purpose: only errors are worth printing.
Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }), forward: {} } },
});

export async function startWorkflowTestEnv(): Promise<TestWorkflowEnvironment> {
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: temporalBinary },
      searchAttributes: tbtSearchAttributeKeys,
      extraArgs: ['--log-level', 'error'],
    },
  });
}

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;
export function workflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundle ??= bundleWorkflowCode({
    workflowsPath: path.join(repoRoot, 'workflows', 'index.ts'),
    logger: { log() {}, info() {}, warn() {}, error: console.error, debug() {}, trace() {} } as never,
  });
  return bundle;
}

export async function mockedWorker(
  env: TestWorkflowEnvironment,
  taskQueue: string,
  activities: object,
): Promise<Worker> {
  return Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    workflowBundle: await workflowBundle(),
    // Questions to Temporal itself (the campaign's queue watch, whether a campaign trains on a server) are asked
    // of the test's server, as the bookkeeping worker asks its own; a test may replace them.
    activities: { ...createQueueWatchActivities(), campaignTrainingOn, ...activities },
    maxConcurrentActivityTaskExecutions: 1000,
  });
}

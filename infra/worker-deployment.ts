import type { WorkerOptions } from '@temporalio/worker';
import type { Environment } from '../config/environment.ts';

/**
 * Worker Versioning, opt-in by `TBT_WORKER_DEPLOYMENT_NAME`: the orchestrator and the bookkeeping worker (they
 * share a task queue) join that Worker Deployment with the workflow bundle's build id. Workflows are pinned to
 * the build they started on (a training step or an evaluation child finishes on its code); a campaign moves to
 * the current build at its next continue-as-new (campaign-workflow.ts). A new build takes work once it is made
 * current: `temporal worker deployment set-current-version --deployment-name NAME --build-id ID`; the old
 * build's workers stay up until their pinned workflows have drained (docs/operations.md).
 */
export function workerDeploymentOptions(
  env: Pick<Environment, 'TBT_WORKER_DEPLOYMENT_NAME'>,
  buildId: string,
): Pick<WorkerOptions, 'workerDeploymentOptions'> {
  const deploymentName = env.TBT_WORKER_DEPLOYMENT_NAME;
  if (!deploymentName) return {};
  return {
    workerDeploymentOptions: {
      version: { deploymentName, buildId },
      useWorkerVersioning: true,
      defaultVersioningBehavior: 'PINNED',
    },
  };
}

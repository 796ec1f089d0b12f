import { Client } from '@temporalio/client';
import type { Environment } from '../config/environment.ts';
import { connectTemporalClient } from './temporal-connection.ts';

/** What `adoptFirstVersion` found or did, in words for `tbt workers up`. */
export interface FirstVersionOutcome {
  buildId?: string;
  made: 'current' | 'already-current' | 'other-current' | 'not-registered';
  text: string;
}

type Summary = { deploymentVersion?: { buildId?: string | null } | null; version?: string | null };

/**
 * A Worker Deployment's first build made current. With Worker Versioning on, a versioned worker takes no task until
 * its build is the deployment's current (or ramping) version, and a local stack has nobody else to promote it: when
 * the deployment has no current version and exactly one build has polled, that build becomes current. Any later
 * build is promoted by the operator (`temporal worker deployment set-current-version`, docs/operations.md): a
 * deploy never changes the current version behind their back. Waits up to `timeoutMs` for the build to register
 * (the server learns of a version from its workers' first poll).
 */
export async function adoptFirstVersion(
  client: Client,
  namespace: string,
  deploymentName: string,
  timeoutMs = 60_000,
): Promise<FirstVersionOutcome> {
  const service = client.workflowService;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const info = await service
      .describeWorkerDeployment({ namespace, deploymentName })
      .then((r) => r.workerDeploymentInfo)
      .catch((err: { code?: number }) => {
        if (err.code === 5) return undefined; // NOT_FOUND: no worker of this deployment has polled yet
        throw err;
      });
    const current = info?.routingConfig?.currentDeploymentVersion?.buildId;
    const builds = ((info?.versionSummaries ?? []) as Summary[])
      .map((s) => s.deploymentVersion?.buildId ?? s.version?.split('.').pop())
      .filter((b): b is string => !!b);
    if (current) {
      const only = builds.length === 1 && builds[0] === current;
      return only
        ? { buildId: current, made: 'already-current', text: `build ${current} is current` }
        : {
            buildId: current,
            made: 'other-current',
            text:
              `build ${current} is current; other builds: ${builds.filter((b) => b !== current).join(', ')} ` +
              `(make one current with \`temporal worker deployment set-current-version --deployment-name ` +
              `${deploymentName} --build-id ID\`)`,
          };
    }
    if (builds.length === 1) {
      await service.setWorkerDeploymentCurrentVersion({
        namespace,
        deploymentName,
        buildId: builds[0],
        identity: 'tbt workers up',
      });
      return { buildId: builds[0], made: 'current', text: `build ${builds[0]} made current (the first build)` };
    }
    if (builds.length > 1 || Date.now() > deadline)
      return {
        made: 'not-registered',
        text:
          builds.length > 1
            ? `no current build and ${builds.length} builds (${builds.join(', ')}): make one current with ` +
              `\`temporal worker deployment set-current-version --deployment-name ${deploymentName} --build-id ID\``
            : `no build registered within ${Math.round(timeoutMs / 1000)}s: is the orchestrator worker running?`,
      };
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** `adoptFirstVersion` over a connection of its own to the environment's Temporal (`tbt workers up`, compose). */
export async function adoptFirstVersionIn(
  env: Environment,
  deploymentName: string,
  connectTimeoutMs?: number,
): Promise<FirstVersionOutcome> {
  const connection = await connectTemporalClient(env, connectTimeoutMs);
  try {
    const client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
    return await adoptFirstVersion(client, env.TBT_TEMPORAL_NAMESPACE, deploymentName);
  } finally {
    await connection.close();
  }
}

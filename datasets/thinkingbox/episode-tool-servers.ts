import type { ImportedTask } from '../../config/thinkingbox-schema.ts';
import { BadInputError } from '../../core/errors.ts';
import type { DatasetEnvironment } from './dataset-environment.ts';
import type { ThinkingBoxSuite } from './imported-suite.ts';
import { callReserved } from './reserved-tools.ts';
import { serverLaunchSpec, type LaunchSpec } from './server-launch.ts';
import type { StartedServer, StdioServerPool } from './stdio-server-pool.ts';

/**
 * The tool servers of one episode: a fresh process (from the warm pool) for each server the task's world_state
 * names, and their end: `__reserved__teardown`, then a stop of every process.
 */

/** What starts each server the task names; a server that is not defined or not a process is the task's error. */
function launchSpecs(suite: ThinkingBoxSuite, task: ImportedTask, dataset: DatasetEnvironment): LaunchSpec[] {
  return Object.keys(task.world_state).map((name) => {
    const spec = suite.imported.servers[name];
    if (!spec)
      throw new BadInputError(
        `task ${task.uid}: world_state names server '${name}', which servers.yaml does not define`,
      );
    if (spec.transport !== 'stdio')
      throw new BadInputError(
        `task ${task.uid}: server '${name}' is mcp-remote (${spec.url}); the episode backend runs mcp-process ` +
          `servers only (a shared remote server is not a fresh backend per episode)`,
      );
    return serverLaunchSpec(spec, dataset);
  });
}

/** The started servers, in world_state order; when one does not start, the others are stopped again. */
export async function startEpisodeServers(
  pool: StdioServerPool,
  suite: ThinkingBoxSuite,
  task: ImportedTask,
  dataset: DatasetEnvironment,
): Promise<StartedServer[]> {
  const names = Object.keys(task.world_state);
  const specs = launchSpecs(suite, task, dataset);
  const settled = await Promise.allSettled(names.map((name, i) => pool.acquire(name, specs[i]!)));
  const servers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await stopEpisodeServers(servers);
    throw failed.reason;
  }
  return servers;
}

/** Ends the episode on every server; never throws (a teardown that fails still stops the process). */
export async function stopEpisodeServers(servers: StartedServer[]): Promise<void> {
  await Promise.all(servers.map((s) => callReserved(s, 'teardown', {}, 5_000).catch(() => undefined)));
  await Promise.all(servers.map((s) => s.stop()));
}

import { readEnvironment } from '../../config/environment.ts';
import { adoptFirstVersionIn } from '../../infra/worker-deployment-first-version.ts';
import { stopDetachedGpuProcesses } from '../../learner-control/campaign-gpu-processes.ts';
import { startWorkers, stopWorkers, workerKinds, workerLog, workerPid } from '../../infra/local-workers.ts';
import { commandErrorExit, consoleIo, UsageError } from '../command-support.ts';
import { workersCommand } from '../command-definitions.ts';
import { findCommand } from '../command-help.ts';
import { commandLineOrExit } from '../command-line.ts';

/** `tbt workers up|down|status`: the local worker processes. */
export async function workers(args: string[]): Promise<number> {
  const sub = args[0];
  const command = sub === undefined ? undefined : findCommand(`workers ${sub}`);
  if (!command) {
    const problem = sub === undefined ? 'a subcommand is required' : `unknown subcommand '${sub}'`;
    return commandErrorExit(new UsageError(problem), workersCommand, consoleIo);
  }
  const line = commandLineOrExit(command, args.slice(1));
  if (typeof line === 'number') return line;
  const env = readEnvironment();
  if (sub === 'up') {
    const started = startWorkers(env);
    for (const k of workerKinds)
      console.log(`${k.padEnd(12)} ${started.includes(k) ? 'started' : 'already running'} (log ${workerLog(env, k)})`);
    // With Worker Versioning on, the deployment's first build is made current (nobody else promotes it locally).
    const deployment = env.TBT_WORKER_DEPLOYMENT_NAME;
    if (deployment)
      console.log(`${'deployment'.padEnd(12)} ${deployment}: ${(await adoptFirstVersionIn(env, deployment)).text}`);
    return 0;
  }
  if (sub === 'down') {
    const stopped = await stopWorkers(env);
    // Learners and policy servers run detached so they survive a GPU-worker crash; `down` stops them too.
    const detached = await stopDetachedGpuProcesses(env.TBT_STATE_DIR);
    console.log(stopped.length ? `stopped: ${stopped.join(', ')}` : 'no worker was running');
    if (detached) console.log(`stopped ${detached} learner / policy server process(es)`);
    return 0;
  }
  if (sub === 'status') {
    for (const k of workerKinds)
      console.log(`${k.padEnd(12)} ${workerPid(env, k) ? `running (pid ${workerPid(env, k)})` : 'stopped'}`);
    return workerKinds.every((k) => workerPid(env, k)) ? 0 : 1;
  }
  throw new Error(`tbt workers ${sub}: defined but not handled`);
}

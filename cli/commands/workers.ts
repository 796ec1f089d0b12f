import { readEnvironment } from '../../config/environment.ts';
import { stopDetachedGpuProcesses } from '../../learner-control/campaign-gpu-processes.ts';
import { startWorkers, stopWorkers, workerKinds, workerLog, workerPid } from '../../infra/local-workers.ts';

export async function workers(args: string[]): Promise<number> {
  const env = readEnvironment();
  const sub = args[0];
  if (sub === 'up') {
    const started = startWorkers(env);
    for (const k of workerKinds)
      console.log(`${k.padEnd(12)} ${started.includes(k) ? 'started' : 'already running'} (log ${workerLog(env, k)})`);
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
  console.error('usage: tbt workers up|down|status');
  return 2;
}

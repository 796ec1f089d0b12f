import path from 'node:path';
import { readEnvironment, repoRoot, temporalUiUrl } from '../../config/environment.ts';
import { startWorkers, workerKinds, workerLog } from '../../infra/local-workers.ts';
import { startCampaign } from './campaign.ts';
import { up } from './infra.ts';
import { demoCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';

/**
 * `npm run demo`: the main job on the embedded default. Brings up local Temporal + Postgres and the four
 * workers, then runs (or, if one is already running, follows) a complete short campaign of
 * config/local.yaml: ingest, probe, select, evaluate, 2 training steps of the real small model, evaluate, report.
 */
export async function demo(args: string[]): Promise<number> {
  const line = commandLineOrExit(demoCommand, args);
  if (typeof line === 'number') return line;
  const started = Date.now();
  const env = readEnvironment();
  await up();
  const spawned = startWorkers(env);
  for (const k of workerKinds)
    console.log(
      `worker ${k.padEnd(12)} ${spawned.includes(k) ? 'started' : 'already running'} (log ${workerLog(env, k)})`,
    );
  const config = line.positionals[0] ?? path.join(repoRoot, 'config', 'local.yaml');
  const { workflowId, status } = await startCampaign(config, { wait: true });
  const minutes = ((Date.now() - started) / 60_000).toFixed(1);
  console.log(`\ncampaign ${workflowId}: ${status?.stage} after ${status?.step} steps, ${minutes} min`);
  if (status?.report) {
    console.log(`report:      ${status.report.html}`);
    console.log(`summary:     ${status.report.markdown}`);
  }
  console.log(`Temporal UI: ${temporalUiUrl(env)} (search: TbtCampaign = "${workflowId}")`);
  console.log('workers and servers keep running in the background; stop them all with `./bin/tbt down`.');
  return 0;
}

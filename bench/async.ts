import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client, WorkflowNotFoundError } from '@temporalio/client';
import { startCampaign } from '../cli/commands/campaign.ts';
import { up } from '../cli/commands/infra.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { writeConfigVariant } from '../config/config-variant.ts';
import { readEnvironment, repoRoot } from '../config/environment.ts';
import { stepsFile } from '../campaign-records/steps-file.ts';
import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { startWorkers, stopWorkers, workerKinds } from '../infra/local-workers.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { asyncBenchLine, asyncBenchVariant, parseAsyncBenchArgs, type AsyncBenchMode } from './async-options.ts';

/**
 * bench:async: is the overlapped loop faster, with the lag it promises? The campaign of bench/async/config.yaml runs
 * three times in one go, synchronously (`training.max_staleness: 0`), overlapped (1), and overlapped with partial
 * rollouts (`training.partial_rollouts`: a sync interrupts the episodes in flight), with the embedded vLLM policy
 * server pinned to CPU 0 and the CPU learner to CPU 1 in both (TBT_POLICY_CPUS, TBT_LEARNER_CPUS), as inference and
 * training GPUs are separate pools on a cluster. Each run's training time is its first step child's start to its
 * last one's close (Temporal); the campaign is then cancelled (the bench does not need its evaluation), which
 * releases its learner and policy server. Per mode it prints where each step's time went (steps.jsonl: sampling,
 * update and export, the wait for episodes in flight before the sync, the sync) and ends with
 *   async: steps=N sync_minutes=S async_minutes=A partial_minutes=P speedup=X partial_speedup=Y mean_lag=L max_lag=M
 * (the lag over every trained episode of the overlapped runs, partial included, by its oldest token). Goal: speedup
 * >= 1.4 with max_lag <= 1. `--workload rollouts` makes rollouts dominate (bench/async-options.ts), where partial
 * rollouts save the drain; `--modes` runs fewer modes (sync always).
 *   npm run bench:async [-- --steps N] [-- --config FILE] [-- --workload default|rollouts]
 *                       [-- --modes sync,async,partial]
 */

const values = parseAsyncBenchArgs(process.argv.slice(2), path.join(repoRoot, 'bench', 'async', 'config.yaml'));

interface StepLine {
  step: number;
  sample_s: number | null;
  update_s: number | null;
  drain_s: number | null;
  sync_s: number | null;
  lag_mean: number | null;
  lag_max: number | null;
  version_mix?: Record<string, number> | null;
  groups: number;
}

const env = readEnvironment();
await up();
// What the GPU worker starts runs pinned; OpenMP threads unbound inside (vLLM would bind its own choice of cores).
const pinned = {
  ...process.env,
  TBT_POLICY_CPUS: env.TBT_POLICY_CPUS ?? '0',
  TBT_LEARNER_CPUS: env.TBT_LEARNER_CPUS ?? (os.cpus().length > 1 ? '1' : '0'),
  VLLM_CPU_OMP_THREADS_BIND: process.env.VLLM_CPU_OMP_THREADS_BIND ?? 'nobind',
};
const steps = Number(values.steps ?? loadCampaignConfig(values.config).training.steps);
const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-async-'));
const spawned = startWorkers(env, workerKinds, pinned);
if (!spawned.includes('gpu')) {
  await stopWorkers(env, spawned);
  throw new Error('a GPU worker is already running, so its processes would not be pinned: `tbt workers down` first');
}
const connection = await connectTemporalClient(env);
const client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
const results: { mode: AsyncBenchMode; minutes: number; lines: StepLine[] }[] = [];
try {
  for (const mode of values.modes) {
    let name = '';
    const file = writeConfigVariant(values.config, path.join(folder, `${mode}.yaml`), (config) => {
      asyncBenchVariant(config as Parameters<typeof asyncBenchVariant>[0], mode, values.workload, steps);
      name = String(config.name);
    });
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
    const { workflowId } = await startCampaign(file, { wait: false, id: `${name}-${stamp}` });
    const minutes = await trainingMinutes(client, workflowId, steps);
    const lines = fs
      .readFileSync(stepsFile(env.TBT_STATE_DIR, workflowId), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as StepLine);
    results.push({ mode, minutes, lines });
    printMode(mode, workflowId, minutes, lines);
    pruneLearnerFolder(learnerFiles(env.TBT_STATE_DIR, workflowId).dir, {
      ...defaultRetention,
      keepExports: 0,
      keepCheckpoints: 0,
    });
  }
} finally {
  await connection.close();
  await stopWorkers(env, spawned);
}
const lags = results.filter((r) => r.mode !== 'sync').flatMap((r) => r.lines.filter((l) => l.lag_mean !== null));
const meanLag = lags.reduce((a, l) => a + l.lag_mean!, 0) / Math.max(1, lags.length);
const maxLag = Math.max(0, ...lags.map((l) => l.lag_max!));
console.log(
  asyncBenchLine({ steps, minutes: Object.fromEntries(results.map((r) => [r.mode, r.minutes])), meanLag, maxLag }),
);

/**
 * Waits for the campaign's last step child to close, then cancels the campaign (it releases its GPU processes) and
 * returns the minutes from the first step's start to the last step's close.
 */
async function trainingMinutes(temporal: Client, workflowId: string, lastStep: number): Promise<number> {
  const campaign = temporal.workflow.getHandle(workflowId);
  const describe = (id: string) =>
    temporal.workflow
      .getHandle(id)
      .describe()
      .catch((err: unknown) => (err instanceof WorkflowNotFoundError ? undefined : Promise.reject(err)));
  for (;;) {
    const last = await describe(`${workflowId}/step-${lastStep}`);
    if (last?.closeTime) {
      if (last.status.name !== 'COMPLETED') throw new Error(`${workflowId}/step-${lastStep}: ${last.status.name}`);
      break;
    }
    const state = await campaign.describe();
    if (state.status.name !== 'RUNNING') throw new Error(`campaign ${workflowId} ended: ${state.status.name}`);
    await delay(5000);
  }
  await campaign.cancel();
  await campaign.result().catch(() => undefined);
  const first = (await describe(`${workflowId}/step-1`))!;
  const last = (await describe(`${workflowId}/step-${lastStep}`))!;
  return (last.closeTime!.getTime() - first.startTime.getTime()) / 60_000;
}

function printMode(mode: string, workflowId: string, minutes: number, lines: StepLine[]): void {
  const sum = (k: keyof StepLine) => lines.reduce((a, l) => a + Number(l[k] ?? 0), 0);
  const total = minutes * 60;
  console.log(`\n${mode}: campaign ${workflowId}, training ${minutes.toFixed(1)} min (${total.toFixed(0)} s)`);
  console.log('step  sample_s  update_s  drain_s  sync_s  lag_mean  lag_max');
  for (const l of lines)
    console.log(
      [l.step, l.sample_s, l.update_s, l.drain_s, l.sync_s, l.lag_mean, l.lag_max]
        .map((v, i) => (typeof v === 'number' && i > 0 ? v.toFixed(i >= 5 ? 2 : 1) : String(v)).padStart(i ? 8 : 4))
        .join('  '),
    );
  console.log(
    `sum   sample ${sum('sample_s').toFixed(0)} s, update ${sum('update_s').toFixed(0)} s, drain ` +
      `${sum('drain_s').toFixed(0)} s, sync ${sum('sync_s').toFixed(0)} s (of ${total.toFixed(0)} s of training); ` +
      `sample/update ${(sum('sample_s') / Math.max(1e-9, sum('update_s'))).toFixed(2)}`,
  );
  // Trained tokens per sampler version over the run (partial rollouts mix versions within an episode).
  const mix: Record<string, number> = {};
  for (const l of lines) for (const [v, n] of Object.entries(l.version_mix ?? {})) mix[v] = (mix[v] ?? 0) + n;
  const mixed = lines.filter((l) => Object.keys(l.version_mix ?? {}).length > 1).length;
  if (Object.keys(mix).length) console.log(`version mix: ${JSON.stringify(mix)}; ${mixed} steps trained on several`);
}

/**
 * Kill -9 crash suite (on demand, not part of `npm test`):
 *   `npm run test:crash [-- --seed N --only a,b --baseline ID --phases train --max-staleness 1]`.
 *
 * Runs the 4-step campaign of config/crash-test.yaml (tiny suite, the bundled SmolLM2-135M on CPU, real learner
 * updates) once uninterrupted as the baseline, then once per victim: the rollout worker, the GPU worker together
 * with its learner (torchrun and its rank 0), the orchestrator worker, the Temporal dev server. Each victim gets
 * SIGKILL at a seeded random point (a random delay after the campaign enters a random phase: the probe, one of the
 * training steps, the evaluation after training or the report; `--phases train` for training steps only), is
 * restarted (`tbt workers up` / `tbt up`), and the campaign must complete. Checks per run, each PASS/FAIL:
 * completion, one campaign_steps row per step 1..4, the learner's checkpoint lineage (one update per step, each
 * on its predecessor, on exactly the recorded episodes), the per-step training episode keys equal the baseline's,
 * and no episode counted twice (scripts/campaign-run-checks.ts, shared with the fault suite).
 * Exit 1 if any check fails; summary in $TBT_STATE_DIR/crash-test/summary.json.
 *
 * Uses the servers and workers of the current environment (TBT_STATE_DIR, TBT_TEMPORAL_PORT, TBT_PG_PORT,
 * TBT_TASK_QUEUE_PREFIX): isolate it from other work with those variables.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { readEnvironment, repoRoot } from '../config/environment.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { writeConfigVariant } from '../config/config-variant.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { mulberry32 } from '../core/metrics.ts';
import { isAlive, readPid } from '../infra/daemon.ts';
import { workerPid } from '../infra/local-workers.ts';
import { check, type Facts } from './campaign-run-checks.ts';
import { now, phaseLabel, secs, sleep, timeStamp, type Phase } from './campaign-run-driver.ts';
import { finishRun, reuseBaseline, runBaseline, startRun, openSuite } from './campaign-run.ts';
import { checksCell, printTable, suiteFailures, writeSummary, type RunSummary } from './campaign-run-summary.ts';

const { values: opts } = parseArgs({
  options: {
    config: { type: 'string', default: path.join(repoRoot, 'config', 'crash-test.yaml') },
    seed: { type: 'string' },
    only: { type: 'string' },
    baseline: { type: 'string' },
    'timeout-min': { type: 'string', default: '25' },
    'keep-checkpoints': { type: 'boolean', default: false },
    phases: { type: 'string', default: 'all' },
    'max-staleness': { type: 'string' },
  },
});

const env = readEnvironment();
// --max-staleness K: the same campaign with overlapped steps (docs/async-training.md), the lag corrected by is_cap.
if (opts['max-staleness'] !== undefined) {
  const k = Number(opts['max-staleness']);
  if (!Number.isInteger(k) || k < 0) throw new Error(`--max-staleness: expected an integer >= 0, got ${k}`);
  opts.config = writeConfigVariant(
    opts.config!,
    path.join(env.TBT_STATE_DIR, 'crash-test', `config-k${k}.yaml`),
    (c) => {
      c.name = `${c.name}-k${k}`;
      c.training.max_staleness = k;
      c.learner.is_cap ??= 2;
      c.learner.sampler_logprobs ??= 'processed'; // sampled at temperature 0.7: compare like with like
    },
  );
}
const config = loadCampaignConfig(opts.config!);
const STEPS = config.training.steps;
const seed = opts.seed !== undefined ? Number(opts.seed) : Math.floor(Date.now() % 1_000_000);
const stamp = timeStamp();
const { suite, driver, outDir, log } = openSuite(env, config, {
  tag: 'crash',
  folder: 'crash-test',
  timeoutMin: opts['timeout-min']!,
  keepCheckpoints: opts['keep-checkpoints']!,
});

type Victim = 'rollout' | 'gpu' | 'orchestrator' | 'temporal';
const allVictims: Victim[] = ['rollout', 'gpu', 'orchestrator', 'temporal'];
/** Seconds after the chosen training step starts; the rollout window is where episodes are in flight. */
const delayWindow: Record<Victim, [number, number]> = {
  rollout: [2, 25],
  gpu: [5, 60],
  orchestrator: [0, 60],
  temporal: [0, 60],
};

/** Seconds after the phase begins, for phases other than training steps (they are shorter). */
const phaseWindow = { probe: [2, 30], 'evaluate-after': [1, 20], report: [0, 3] } as const;

/**
 * Where a kill may land: a training step, or (with --phases all) the probe, the evaluation after training,
 * the report.
 */
function drawPlan(victim: Victim): { phase: Phase; delayS: number } {
  if (!['all', 'train'].includes(opts.phases!)) throw new Error(`--phases must be all or train, not ${opts.phases}`);
  const phases: Phase[] = [
    ...(opts.phases === 'all' ? [{ kind: 'probe' } as const] : []),
    ...Array.from({ length: STEPS }, (_, i) => ({ kind: 'step', step: i + 1 }) as const),
    ...(opts.phases === 'all' ? [{ kind: 'evaluate-after' } as const, { kind: 'report' } as const] : []),
  ];
  const phase = phases[Math.floor(random() * phases.length)]!;
  const [lo, hi] = phase.kind === 'step' ? delayWindow[victim] : phaseWindow[phase.kind];
  return { phase, delayS: Math.round((lo + random() * (hi - lo)) * 10) / 10 };
}

// A seeded RNG, so a failing run can be repeated with --seed.
const random = mulberry32(seed);

// --- Victims ------------------------------------------------------------------------------------------------
function kill(pid: number | undefined, what: string, killed: string[]): void {
  if (pid === undefined || !isAlive(pid)) return;
  process.kill(pid, 'SIGKILL');
  killed.push(`${what} ${pid}`);
}

function killVictim(victim: Victim, campaignId: string): string[] {
  const killed: string[] = [];
  if (victim === 'temporal')
    kill(readPid(path.join(env.TBT_STATE_DIR, 'temporal', 'server.pid')), 'temporal dev server', killed);
  else kill(workerPid(env, victim), `${victim} worker`, killed);
  if (victim === 'gpu') {
    // Its learner: torchrun (pid file) and rank 0, which torchrun starts in a session of its own.
    const files = learnerFiles(env.TBT_STATE_DIR, campaignId);
    kill(readPid(files.pid), 'learner torchrun', killed);
    try {
      const { pid } = JSON.parse(fs.readFileSync(path.join(files.checkpoints, 'control.json'), 'utf8')) as {
        pid?: number;
      };
      kill(pid, 'learner rank 0', killed);
    } catch {
      // no rank 0 yet
    }
  }
  return killed;
}

function restart(victim: Victim): { seconds: number; out: string } {
  const started = now();
  const outs: string[] = [];
  for (const args of victim === 'temporal' ? [['up'], ['workers', 'up']] : [['workers', 'up']]) {
    const r = driver.tbt(...args);
    outs.push(r.out);
    if (!r.ok) throw new Error(`tbt ${args.join(' ')} failed:\n${r.out}`);
  }
  return { seconds: secs(now() - started), out: outs.join('\n') };
}

interface CrashRunSummary extends RunSummary {
  victim: Victim | 'none';
  killPoint?: { phase: string; delayS: number; observed: string; killed: string[] };
  restartS?: number;
}

async function runVictim(victim: Victim, baseline: Facts): Promise<CrashRunSummary> {
  const campaignId = `crash-${victim}-${stamp}`;
  const plan = drawPlan(victim);
  log(`run ${campaignId}: kill -9 ${victim} ${plan.delayS}s after ${phaseLabel(plan.phase)} starts`);
  const started = await startRun(opts.config!, campaignId);
  if (!(await driver.waitForPhase(campaignId, plan.phase, started)))
    throw new Error(`${campaignId}: ${phaseLabel(plan.phase)} never started`);
  await sleep(plan.delayS * 1000);
  const s = await driver.status(campaignId);
  const observed = s ? `stage ${s.stage}, step ${s.step} done` : 'status unavailable';
  const killed = killVictim(victim, campaignId);
  const killPoint = { phase: phaseLabel(plan.phase), delayS: plan.delayS, observed, killed };
  log(`  killed at ${secs(now() - started)}s (${observed}): ${killed.join(', ') || 'nothing was running!'}`);
  await sleep(1000);
  const r = restart(victim);
  log(`  restarted in ${r.seconds}s: ${r.out.replace(/\n/g, ' | ')}`);
  const end = await driver.waitForEnd(campaignId, started);
  const extra = killed.length ? [] : [check('the victim was killed', false, 'no process to kill at the chosen point')];
  const { summary } = await finishRun(suite, { name: `kill ${victim}`, id: campaignId, started, end, baseline, extra });
  return { ...summary, victim, killPoint, restartS: r.seconds };
}

async function main(): Promise<number> {
  const victims = opts.only === 'none' ? [] : opts.only ? (opts.only.split(',') as Victim[]) : allVictims;
  for (const v of victims)
    if (!allVictims.includes(v)) throw new Error(`--only: unknown victim ${v} (one of ${allVictims.join(', ')})`);
  log(
    `seed ${seed} (repeat with --seed ${seed}); config ${opts.config}; state ${env.TBT_STATE_DIR}; queue prefix ` +
      `${env.TBT_TASK_QUEUE_PREFIX}; victims ${victims.join(', ')}`,
  );
  driver.stackUp();
  const suiteStarted = now();
  const runs: CrashRunSummary[] = [];
  const base = opts.baseline
    ? await reuseBaseline(suite, opts.baseline)
    : await runBaseline(suite, opts.config!, `crash-baseline-${stamp}`);
  runs.push({ ...base.summary, victim: 'none' });
  for (const victim of victims) runs.push(await runVictim(victim, base.f));
  await driver.close();

  console.log(`\ncrash suite, seed ${seed}, ${secs(now() - suiteStarted)}s in all`);
  printTable(
    ['run', 'kill point', 'killed', 'restart s', 'wall s', 'real updates', 'checks'],
    runs.map((r) => [
      r.run,
      r.killPoint ? `${r.killPoint.phase} +${r.killPoint.delayS}s (${r.killPoint.observed})` : '-',
      r.killPoint?.killed.join(', ') || '-',
      r.restartS === undefined ? '-' : String(r.restartS),
      String(r.wallS),
      `${r.realUpdates}/${STEPS}`,
      checksCell(r),
    ]),
  );
  const failed = suiteFailures(runs, STEPS);
  writeSummary(path.join(outDir, 'summary.json'), {
    seed,
    config: opts.config,
    stamp,
    totalS: secs(now() - suiteStarted),
    passed: failed.length === 0,
    runs,
  });
  if (failed.length) {
    console.log(`\nFAILED (${failed.length}):\n${failed.map((f) => `  ${f}`).join('\n')}`);
    return 1;
  }
  console.log('\nall crash checks passed');
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);

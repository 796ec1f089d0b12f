/**
 * Kill -9 crash suite (on demand, not part of `npm test`):
 *   `npm run test:crash [-- --seed N --only a,b --baseline ID --phases train --max-staleness 1]`,
 *   `npm run test:crash -- --scenario resume [--kills 2 --max-turns 4 --seed N]` (turn-level resume, below).
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
 * `--scenario resume` runs the campaign with multi-turn episodes (`--max-turns`, 4) as its own baseline, then once
 * with the rollout worker killed `--kills` times (2), each at a seeded point of a distinct training step and only
 * once a running episode has a saved turn in `episode_turns`; what the turns were at each kill is read right after
 * it. Besides every check above: each interrupted episode resumed at its last completed turn and its trajectory
 * starts with the tokens saved before the kill (scripts/crash-resume-checks.ts); last line `crash-resume: ...`.
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
import {
  checkResumed,
  interruptedNow,
  resumeLine,
  waitForLiveSavedTurn,
  type DeadAttempts,
  type Interruption,
  type ResumeTally,
} from './crash-resume-checks.ts';
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
    scenario: { type: 'string', default: 'victims' },
    kills: { type: 'string', default: '2' },
    'max-turns': { type: 'string', default: '4' },
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
if (!['victims', 'resume'].includes(opts.scenario!))
  throw new Error(`--scenario must be victims or resume, not ${opts.scenario}`);
// --scenario resume: the same campaign with episodes of several agent turns, so that a kill can land between them.
if (opts.scenario === 'resume') {
  const turns = Number(opts['max-turns']);
  if (!Number.isInteger(turns) || turns < 2) throw new Error(`--max-turns: expected an integer >= 2, got ${turns}`);
  opts.config = writeConfigVariant(
    opts.config!,
    path.join(env.TBT_STATE_DIR, 'crash-test', 'config-resume.yaml'),
    (c) => {
      c.name = `${c.name}-resume`;
      const episode = (c.episode ??= {}) as { limits?: Record<string, unknown> };
      (episode.limits ??= {}).max_agent_turns = turns;
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
  victim: Victim | 'resume' | 'none';
  killPoint?: { phase: string; delayS: number; observed: string; killed: string[] };
  restartS?: number;
  resume?: { kills: ResumeKill[]; interruptions: Interruption[]; tally: ResumeTally; line: string };
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

// --- The resume scenario: kill -9 of the rollout worker between the turns of multi-turn episodes -------------------
/** Seconds after the chosen training step starts before the suite looks for a running episode with a saved turn. */
const resumeDelayWindow: [number, number] = [0, 15];
/** How long a kill waits for a running episode with a saved turn (of an attempt no kill has seen) before it passes. */
const LIVE_TURN_WAIT_MS = 180_000;

interface ResumeKill {
  phase: string;
  delayS: number;
  /** Seconds into the run when the worker died; undefined when no live saved turn came in time. */
  atS?: number;
  killed: string[];
  interrupted: number;
  turnsSaved: number;
  restartS?: number;
}

/** `--kills` distinct training steps (ascending), each with a delay: the seeded points of the kills. */
function drawResumePlans(n: number): { phase: Phase; delayS: number }[] {
  if (!Number.isInteger(n) || n < 1 || n > STEPS) throw new Error(`--kills: expected 1..${STEPS}, got ${n}`);
  const steps = Array.from({ length: STEPS }, (_, i) => i + 1);
  const chosen: number[] = [];
  while (chosen.length < n) chosen.push(steps.splice(Math.floor(random() * steps.length), 1)[0]!);
  const [lo, hi] = resumeDelayWindow;
  return chosen
    .sort((a, b) => a - b)
    .map((step) => ({ phase: { kind: 'step', step }, delayS: Math.round((lo + random() * (hi - lo)) * 10) / 10 }));
}

/**
 * One run of the resume scenario: at each seeded point, wait until a running episode of the campaign has a turn
 * saved by a live attempt, kill -9 the rollout worker, read the saved turns at once (the reference: nothing saves
 * while the worker is down), restart it. After the end, every crash check plus the resume checks.
 */
async function runResume(baseline: Facts): Promise<CrashRunSummary> {
  const campaignId = `crash-resume-${stamp}`;
  const plans = drawResumePlans(Number(opts.kills));
  log(
    `run ${campaignId}: kill -9 rollout inside multi-turn episodes, at ` +
      plans.map((p) => `${phaseLabel(p.phase)} +${p.delayS}s`).join(', '),
  );
  const started = await startRun(opts.config!, campaignId);
  const kills: ResumeKill[] = [];
  const interruptions: Interruption[] = [];
  const dead: DeadAttempts = new Set();
  for (const plan of plans) {
    const kill: ResumeKill = {
      phase: phaseLabel(plan.phase),
      delayS: plan.delayS,
      killed: [],
      interrupted: 0,
      turnsSaved: 0,
    };
    kills.push(kill);
    if (!(await driver.waitForPhase(campaignId, plan.phase, started))) {
      log(`  ${kill.phase} never started; no more kills`);
      break;
    }
    await sleep(plan.delayS * 1000);
    if (!(await waitForLiveSavedTurn(suite.ctx.controlUrl, campaignId, dead, LIVE_TURN_WAIT_MS))) {
      log(`  no running episode saved a turn within ${LIVE_TURN_WAIT_MS / 1000}s after ${kill.phase} +${kill.delayS}s`);
      continue;
    }
    kill.killed = killVictim('rollout', campaignId);
    kill.atS = secs(now() - started);
    // No worker killed, nothing interrupted: its attempts stay live.
    const found = kill.killed.length ? await interruptedNow(suite.ctx.controlUrl, campaignId, kills.length, dead) : [];
    interruptions.push(...found);
    kill.interrupted = found.length;
    kill.turnsSaved = found.reduce((a, i) => a + i.savedTurns, 0);
    log(
      `  kill ${kills.length} at ${kill.atS}s: ${kill.killed.join(', ') || 'nothing was running!'}; interrupted ` +
        (found.map((i) => `${i.episodeId.slice(campaignId.length + 1)} (${i.savedTurns} saved)`).join(', ') || 'none'),
    );
    await sleep(1000);
    const r = restart('rollout');
    kill.restartS = r.seconds;
    log(`  restarted in ${r.seconds}s: ${r.out.replace(/\n/g, ' | ')}`);
  }
  const end = await driver.waitForEnd(campaignId, started);
  const { checks, tally } = await checkResumed(suite.ctx.controlUrl, campaignId, kills, interruptions);
  const { summary } = await finishRun(suite, {
    name: 'kill rollout (resume)',
    id: campaignId,
    started,
    end,
    baseline,
    extra: checks,
  });
  const line = resumeLine(tally, summary.passed);
  log(line);
  const restartS = kills.reduce((a, k) => a + (k.restartS ?? 0), 0);
  const killPoint = {
    phase: kills.map((k) => `${k.phase} +${k.delayS}s`).join('; '),
    delayS: plans[0]!.delayS,
    observed: `${tally.interrupted} episode(s), ${tally.turnsSaved} turn(s) saved`,
    killed: kills.flatMap((k) => k.killed),
  };
  return { ...summary, victim: 'resume', killPoint, restartS, resume: { kills, interruptions, tally, line } };
}

type RunKind = Victim | 'resume';
const allRunKinds: RunKind[] = [...allVictims, 'resume'];

async function main(): Promise<number> {
  const defaults: RunKind[] = opts.scenario === 'resume' ? ['resume'] : allVictims;
  const victims = opts.only === 'none' ? [] : opts.only ? (opts.only.split(',') as RunKind[]) : defaults;
  for (const v of victims)
    if (!allRunKinds.includes(v)) throw new Error(`--only: unknown victim ${v} (one of ${allRunKinds.join(', ')})`);
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
  for (const victim of victims) runs.push(await (victim === 'resume' ? runResume(base.f) : runVictim(victim, base.f)));
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
    scenario: opts.scenario,
    config: opts.config,
    stamp,
    totalS: secs(now() - suiteStarted),
    passed: failed.length === 0,
    runs,
  });
  if (failed.length) console.log(`\nFAILED (${failed.length}):\n${failed.map((f) => `  ${f}`).join('\n')}`);
  else console.log('\nall crash checks passed');
  // The resume scenario's last line: ok only when every check of the suite passed.
  for (const r of runs) if (r.resume) console.log(resumeLine(r.resume.tally, failed.length === 0));
  return failed.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);

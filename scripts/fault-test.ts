/**
 * Fault suite (on demand, not part of `npm test`):
 * `npm run test:faults [-- --seed N --only a,d --baseline ID --sequential]`.
 *
 * Runs the 4-step campaign of config/fault-test.yaml (the crash suite's campaign with short recovery limits) once
 * uninterrupted as the baseline, then once per scenario, each with its fault at a seeded point:
 *   a/b/c  the policy endpoint down for 5 minutes (--outage-min) during the probe / the evaluation after training /
 *          a training step: these runs use a vLLM server the suite starts, behind a TCP proxy it closes and reopens
 *          (base_url = the proxy, sync_instances = the server, so weight syncs still reach it);
 *   d      the GPU worker stopped with SIGTERM mid-step and started again a minute later, three times in one run;
 *   e      the GPU queue without a poller for longer than recovery.gpu_queue_wait_ms: the campaign must pause
 *          naming the queue, and go on once the worker is back;
 *   f      the bookkeeping worker replaced at every stage by a fresh one with an empty state folder;
 *   g      Postgres stopped and started again;
 *   h      the campaign terminated mid-step (`tbt campaign terminate`), then `tbt campaign resume`d;
 *   i      Postgres restarted into recovery for 2 minutes (--recovery-min): clients get SQLSTATE 57P03, then it is
 *          back (scripts/fault-postgres-recovery.ts); overlapped steps (config/fault-test-overlap.yaml);
 *   j      a full checkpoint volume: the learner's disk_full_saves hook (TBT_LEARNER_TEST_HOOKS on the GPU worker)
 *          fails step 1's first save with ENOSPC (--disk-full-saves): 507 disk_full, not retried,
 *          the campaign pauses naming the folder, the next save succeeds ("space freed") without retraining;
 *   k      every rollout worker gone for 10 minutes (--rollout-outage-min) mid-step: the campaign pauses naming the
 *          rollout queue (recovery.rollout_queue_wait_ms), and goes on once they are back;
 *   l      the rollout worker SIGTERMed mid-step (a deploy: TBT_ROLLOUT_DRAIN_S) and started again; LoRA
 *          (config/fault-test-lora.yaml, vLLM; --no-lora: the plain config);
 *   m      the rollout worker SIGKILLed (an OOM kill) once a running episode has saved a turn: each interrupted
 *          episode resumes at its last saved turn with the same tokens (the crash suite's resume checks).
 * a, b and c each share their outage with a partner (the baseline, f, h), which starts once the endpoint closes and
 * the faulted campaign only waits (`--sequential`: every run alone), so that the suite fits in an hour on 2 cores.
 * Each run must complete and pass the crash suite's checks (scripts/campaign-run-checks.ts) against the baseline,
 * plus a check that its fault happened where it was drawn. Last line: `faults: scenarios=N passed=P failed=F
 * minutes=M`; exit 1 if any check fails; summary in $TBT_STATE_DIR/fault-test/summary.json.
 *
 * Uses the servers and workers of the current environment (TBT_STATE_DIR, TBT_TEMPORAL_PORT, TBT_PG_PORT,
 * TBT_TASK_QUEUE_PREFIX); scenarios g and i restart that Postgres: isolate the suite from other work with those
 * variables. With TBT_WORKER_DEPLOYMENT_NAME set the workers run with Worker Versioning on, the deploy shape (`tbt
 * workers up` makes the first build current), and every run also checks that its campaign and steps ran pinned.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { databaseUrl, readEnvironment, repoRoot, taskQueues } from '../config/environment.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { gpuHost } from '../config/gpu-host.ts';
import { mulberry32 } from '../core/metrics.ts';
import { exitedBy } from '../infra/daemon.ts';
import { freePort, startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';
import { startPostgres, stopPostgres } from '../infra/local-postgres.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { startWorkers, stopWorkers, workerKinds, workerPid, type WorkerKind } from '../infra/local-workers.ts';
import type { CampaignStatus } from '../workflows/campaign-workflow.ts';
import { EndpointProxy } from './campaign-endpoint-proxy.ts';
import { clearRecoverySignal, connectCode, endRecovery, startInRecovery } from './fault-postgres-recovery.ts';
import { check, type Check } from './campaign-run-checks.ts';
import {
  checkResumed,
  interruptedNow,
  resumeLine,
  waitForLiveSavedTurn,
  type Interruption,
} from './crash-resume-checks.ts';
import { inPhase, now, phaseLabel, secs, sleep, statusLine, timeStamp, type Phase } from './campaign-run-driver.ts';
import { finishRun, injectedCheck, reuseBaseline, runBaseline, startRun, openSuite } from './campaign-run.ts';
import { checksCell, printTable, suiteFailures, writeSummary, type RunSummary } from './campaign-run-summary.ts';

const { values: opts } = parseArgs({
  options: {
    config: { type: 'string', default: path.join(repoRoot, 'config', 'fault-test.yaml') },
    seed: { type: 'string' },
    only: { type: 'string' },
    baseline: { type: 'string' },
    'timeout-min': { type: 'string', default: '30' },
    'outage-min': { type: 'string', default: '5' },
    'keep-checkpoints': { type: 'boolean', default: false },
    sequential: { type: 'boolean', default: false },
    'recovery-min': { type: 'string', default: '2' },
    'disk-full-saves': { type: 'string', default: '1' },
    'rollout-outage-min': { type: 'string', default: '10' },
    'no-lora': { type: 'boolean', default: false },
  },
});

const env = readEnvironment();
const config = loadCampaignConfig(opts.config!);
const STEPS = config.training.steps;
const OUTAGE_MS = Number(opts['outage-min']) * 60_000;
const GPU_QUEUE = taskQueues(env).gpu(gpuHost(env));
const ROLLOUT_QUEUE = taskQueues(env).rollout;
const variantConfig = (name: string) => path.join(repoRoot, 'config', `fault-test-${name}.yaml`);
/** How long after the endpoint closes the phase must still run for the outage to count as met. */
const HIT_MS = 15_000;
const seed = opts.seed !== undefined ? Number(opts.seed) : Math.floor(Date.now() % 1_000_000);
const stamp = timeStamp();
const { suite, driver, outDir, log } = openSuite(env, config, {
  tag: 'faults',
  folder: 'fault-test',
  timeoutMin: opts['timeout-min']!,
  keepCheckpoints: opts['keep-checkpoints']!,
});

// --- Seeded points ---------------------------------------------------------------------------------------------
const random = mulberry32(seed);
const uniform = (lo: number, hi: number) => Math.round((lo + random() * (hi - lo)) * 10) / 10;
const anyStep = (): Phase => ({ kind: 'step', step: 1 + Math.floor(random() * STEPS) });
const anyPhase = (): Phase => {
  const phases: Phase[] = [
    { kind: 'probe' },
    ...Array.from({ length: STEPS }, (_, i) => ({ kind: 'step', step: i + 1 }) as const),
    { kind: 'evaluate-after' },
    { kind: 'report' },
  ];
  return phases[Math.floor(random() * phases.length)]!;
};

/**
 * Every scenario's point, drawn in one fixed order whatever --only selects, so `--only e --seed N` repeats
 * exactly the point the full suite drew for e with that seed. Delays are seconds after the phase starts.
 */
const plans = {
  a: { phase: { kind: 'probe' } as Phase, delayS: uniform(0, 3) },
  b: { phase: { kind: 'evaluate-after' } as Phase, delayS: uniform(0, 2) },
  c: { phase: anyStep(), delayS: uniform(0, 3) },
  d: { delaysS: [uniform(3, 15), uniform(3, 15), uniform(3, 15)] },
  e: { phase: anyStep(), delayS: uniform(0, 15) },
  f: { delaysS: Array.from({ length: STEPS + 4 }, () => uniform(0, 5)) },
  g: ((phase: Phase) => ({
    phase,
    // Within the phase, which on 2 cores lasts: the probe and the report 5-10 s, a step 9-40 s, the evaluation
    // after training under a minute (a draw past the phase's end restarted Postgres in the next one).
    delayS: phase.kind === 'probe' || phase.kind === 'report' ? uniform(0, 3) : uniform(1, 8),
    downS: uniform(5, 30),
  }))(anyPhase()),
  h: { phase: anyStep(), delayS: uniform(1, 8) },
  // Drawn after a-h, so that their points stay those of earlier seeds. A step can last 9 s on 2 cores: a point
  // mid-step is drawn within its first 8 s.
  // i runs overlapped steps: the last step's episodes were sampled during the one before, so it only trains, in
  // about 3 s on 2 cores (seed 285071 drew 4 s into step 4 and landed in the evaluation after): not the last step.
  i: { phase: { kind: 'step', step: 1 + Math.floor(random() * (STEPS - 1)) } as Phase, delayS: uniform(1, 8) },
  j: { phase: { kind: 'step', step: 1 } as Phase },
  k: { phase: anyStep(), delayS: uniform(1, 8) },
  l: { phase: anyStep(), delayS: uniform(1, 8) },
  m: { phase: anyStep(), delayS: uniform(0, 8) },
};

// --- One faulted run --------------------------------------------------------------------------------------------
interface FaultRun {
  id: string;
  started: number;
  /** Called once the run's campaign idles for a while (its policy endpoint just closed): its partner starts. */
  idle: () => void;
  /** What was done when, for the table and the summary. */
  points: string[];
  extra: Check[];
  /** Set once the run is over (or timed out): a scenario still injecting stops. */
  ended: boolean;
}

/** Workers stopped on purpose right now, by any run: no waiting loop or restore brings them back meanwhile. */
const held = new Set<WorkerKind>();
/** Scenario m's kill and what it interrupted (scripts/crash-resume-checks.ts). */
const resumeState = {
  dead: new Set<string>(),
  kills: [] as { killed: string[] }[],
  interruptions: [] as Interruption[],
};

const at = (run: FaultRun) => `+${Math.round(secs(now() - run.started))}s`;
function note(run: FaultRun, what: string): void {
  run.points.push(`${at(run)} ${what}`);
  log(`  ${at(run)} ${what}`);
}

/**
 * Waits for the phase and the delay after it; the status at that moment, or undefined when the run ended first
 * (or its status could not be read for a minute), which fails the injection check named `what` when given.
 */
async function arrive(run: FaultRun, phase: Phase, delayS: number, what?: string): Promise<CampaignStatus | undefined> {
  const missed = () => void (what && run.extra.push(injectedCheck(what, false, 'the run ended before the phase')));
  if (!(await driver.waitForPhase(run.id, phase, run.started))) return missed();
  await sleep(delayS * 1000);
  for (let tries = 0; tries < 20; tries += 1) {
    const s = await driver.status(run.id);
    if (s) return s;
    await sleep(3000);
  }
  return missed();
}

/** SIGTERM to a worker (a graceful stop, as a deploy sends), held down until released; seconds until it exited. */
async function stopWorker(run: FaultRun, kind: WorkerKind): Promise<{ pid?: number; exitS?: number }> {
  held.add(kind);
  const pid = workerPid(env, kind);
  if (pid === undefined) return {};
  const t0 = now();
  process.kill(pid, 'SIGTERM');
  const exited = await exitedBy(pid, now() + 120_000);
  return { pid, exitS: exited ? secs(now() - t0) : undefined };
}

function releaseWorker(run: FaultRun, kind: WorkerKind): void {
  startWorkers(env, [kind]);
  held.delete(kind);
}

/** Runs fn holding the lock every helper takes around stack restarts (the lock is released when fn settles). */
async function withStackLock<T>(fn: () => Promise<T>): Promise<T> {
  const holder = spawn('flock', ['/tmp/tbt-stack.lock', '-c', 'echo locked; read _'], {
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  await new Promise<void>((resolve, reject) => {
    holder.stdout.once('data', () => resolve());
    holder.once('exit', (code) => reject(new Error(`flock exited with code ${code}`)));
  });
  try {
    return await fn();
  } finally {
    holder.stdin.end();
  }
}

// --- The policy endpoint behind the suite's proxy (a, b, c) --------------------------------------------------
let policy: { server: PolicyServerHandle; proxy: EndpointProxy; configFile: string } | undefined;
/** True while a run holds the endpoint down: a partner's restore must not reopen it. */
let outageOn = false;

/** Starts the suite's vLLM server and proxy once, and writes the campaign config that points at them. */
async function externalPolicy(): Promise<NonNullable<typeof policy>> {
  if (policy) return policy;
  log('starting the suite-owned vLLM policy server and its proxy (scenarios a-c)');
  const server = await startPolicyServer({ engine: 'vllm', logFile: path.join(outDir, 'policy-server.log') });
  const proxy = new EndpointProxy({ host: '127.0.0.1', port: Number(new URL(server.baseUrl).port) }, await freePort());
  await proxy.open();
  const raw = YAML.parse(fs.readFileSync(opts.config!, 'utf8')) as Record<string, unknown> & {
    episode: { policy: Record<string, unknown> };
  };
  const configDir = path.dirname(path.resolve(opts.config!));
  const absolute = (p: unknown) =>
    typeof p === 'string' ? ([path.resolve(configDir, p), path.resolve(repoRoot, p)].find(fs.existsSync) ?? p) : p;
  const derived = {
    ...raw,
    name: `${String(raw.name)}-external-policy`,
    suite: absolute(raw.suite),
    ...(raw.exclude_uids ? { exclude_uids: absolute(raw.exclude_uids) } : {}),
    episode: {
      ...raw.episode,
      policy: {
        ...raw.episode.policy,
        base_url: `http://127.0.0.1:${proxy.port}/v1`,
        model: server.model,
        sync_instances: [server.baseUrl],
      },
    },
  };
  const configFile = path.join(outDir, 'fault-test-external-policy.yaml');
  fs.writeFileSync(configFile, YAML.stringify(derived));
  log(`  vLLM ${server.baseUrl}, proxy port ${proxy.port}, config ${configFile}`);
  policy = { server, proxy, configFile };
  return policy;
}

async function policyOutage(run: FaultRun, phase: Phase, delayS: number): Promise<void> {
  const { proxy } = await externalPolicy();
  const s = await arrive(run, phase, delayS, `policy down in ${phaseLabel(phase)}`);
  if (!s) return;
  outageOn = true;
  await proxy.close();
  note(run, `policy endpoint closed (${statusLine(s)})`);
  const closedAt = now();
  run.idle();
  // The outage must meet the phase's episodes: a phase that ends within the first re-run's backoff did not.
  await sleep(HIT_MS);
  const later = await driver.status(run.id);
  while (now() - closedAt < OUTAGE_MS && !run.ended) await sleep(1000);
  await proxy.open();
  outageOn = false;
  note(run, `policy endpoint reopened after ${secs(now() - closedAt)}s`);
  run.extra.push(
    injectedCheck(
      `policy down ${secs(OUTAGE_MS)}s in ${phaseLabel(phase)}, the phase still on ${secs(HIT_MS)}s later`,
      inPhase(s, phase) && later !== undefined && inPhase(later, phase) && now() - closedAt >= OUTAGE_MS,
      `closed at ${statusLine(s)}; ${secs(HIT_MS)}s later ${statusLine(later)}; down ${secs(now() - closedAt)}s`,
    ),
  );
}

// --- Scenarios ------------------------------------------------------------------------------------------------
type Letter = keyof typeof plans;

interface Scenario {
  title: string;
  externalPolicy?: boolean;
  /** A variant of the suite's config (overlapped steps, LoRA): same tasks, seed and steps, so same keys. */
  config?: string;
  /** Before the run starts and after it ended (a worker started with a test hook, and started again without). */
  setup?(): Promise<void>;
  teardown?(): Promise<void>;
  inject(run: FaultRun): Promise<void>;
  /** Checks of the run's stored results, once its campaign ended (into run.extra). */
  after?(run: FaultRun): Promise<void>;
}

const scenarios: Record<Letter, Scenario> = {
  a: {
    title: 'policy endpoint down during the probe',
    externalPolicy: true,
    inject: (run) => policyOutage(run, plans.a.phase, plans.a.delayS),
  },
  b: {
    title: 'policy endpoint down during the evaluation',
    externalPolicy: true,
    inject: (run) => policyOutage(run, plans.b.phase, plans.b.delayS),
  },
  c: {
    title: 'policy endpoint down during a training step',
    externalPolicy: true,
    inject: (run) => policyOutage(run, plans.c.phase, plans.c.delayS),
  },
  d: {
    title: 'GPU worker SIGTERM mid-step, restarted a minute later, three times',
    async inject(run) {
      const stops: string[] = [];
      let nextStep = 1;
      for (const delayS of plans.d.delaysS) {
        // Each stop lands in a training step after the previous one's: a step may outlast the stop and restart.
        const s = await arrive(run, { kind: 'step', step: nextStep }, delayS);
        if (!s || s.stage !== 'train') break;
        const { pid, exitS } = await stopWorker(run, 'gpu');
        note(run, `gpu worker ${pid ?? '(none running)'} SIGTERM (${statusLine(s)}), exited after ${exitS ?? '>120'}s`);
        if (pid !== undefined && exitS !== undefined) stops.push(`step ${s.step + 1}`);
        await sleep(60_000);
        releaseWorker(run, 'gpu');
        note(run, 'gpu worker started again');
        nextStep = s.step + 2;
      }
      run.extra.push(
        injectedCheck(
          'three SIGTERMs of the GPU worker mid-step, each exiting',
          stops.length === 3,
          `stopped in ${stops.join(', ') || 'no step'}`,
        ),
      );
    },
  },
  e: {
    title: 'GPU queue without a poller beyond its detection limit',
    async inject(run) {
      const limitMs = config.recovery.gpu_queue_wait_ms;
      const s = await arrive(run, plans.e.phase, plans.e.delayS, 'GPU worker stopped');
      if (!s) return;
      const { pid } = await stopWorker(run, 'gpu');
      const t0 = now();
      note(run, `gpu worker ${pid ?? '(none running)'} stopped (${statusLine(s)})`);
      // Up to a heartbeat timeout (2 min) before the retry is scheduled, then the schedule-to-start limit.
      const capMs = 120_000 + limitMs + 180_000;
      let pausedAfter: number | undefined;
      let reason = '';
      while (now() - t0 < capMs && !run.ended) {
        const q = await driver.status(run.id);
        if (q?.paused && (q.pauseReason ?? '').includes(GPU_QUEUE)) {
          pausedAfter = secs(now() - t0);
          reason = q.pauseReason ?? '';
          break;
        }
        await sleep(3000);
      }
      while (now() - t0 < limitMs + 10_000 && !run.ended) await sleep(1000);
      releaseWorker(run, 'gpu');
      note(run, `gpu worker started again after ${secs(now() - t0)}s without a poller`);
      run.extra.push(injectedCheck('GPU worker stopped mid-run', pid !== undefined, `pid ${pid ?? '-'}`));
      run.extra.push(
        check(
          `the campaign paused naming the queue ${GPU_QUEUE}`,
          pausedAfter !== undefined,
          pausedAfter !== undefined
            ? `${pausedAfter}s after the worker stopped: ${reason}`
            : `no such pause within ${secs(capMs)}s`,
        ),
      );
    },
  },
  f: {
    title: 'bookkeeping worker replaced by a fresh one with an empty state folder at every stage',
    async inject(run) {
      let fresh: { env: typeof env; dir: string } | undefined;
      let last = '';
      let replaced = 0;
      held.add('bookkeeping');
      try {
        for (let i = 0; !run.ended;) {
          const s = await driver.status(run.id);
          const key = s ? `${s.stage}/${s.step}` : last;
          const closed = s === undefined && (await driver.describe(run.id)) !== 'RUNNING';
          if (closed || s?.stage === 'done') break;
          if (key !== last) {
            last = key;
            await sleep((plans.f.delaysS[i++ % plans.f.delaysS.length] ?? 0) * 1000);
            await stopWorkers(fresh?.env ?? env, ['bookkeeping']);
            if (fresh) fs.rmSync(fresh.dir, { recursive: true, force: true });
            fresh = startFreshBookkeeping();
            replaced += 1;
            note(run, `bookkeeping worker replaced (${key}), state folder ${fresh.dir}`);
          }
          await sleep(1000);
        }
      } finally {
        if (fresh) {
          await stopWorkers(fresh.env, ['bookkeeping']);
          fs.rmSync(fresh.dir, { recursive: true, force: true });
        }
        releaseWorker(run, 'bookkeeping');
      }
      run.extra.push(
        injectedCheck('bookkeeping worker replaced between stages', replaced >= 4, `${replaced} replacement(s)`),
      );
    },
  },
  g: {
    title: 'Postgres restarted',
    async inject(run) {
      const s = await arrive(run, plans.g.phase, plans.g.delayS, 'Postgres restarted');
      if (!s) return;
      const stopped = await withStackLock(async () => {
        const was = await stopPostgres(env);
        note(run, `postgres stopped (${statusLine(s)}), down for ${plans.g.downS}s`);
        await sleep(plans.g.downS * 1000);
        await startPostgres(env);
        note(run, 'postgres started again');
        return was;
      });
      run.extra.push(
        injectedCheck(
          `Postgres restarted ${plans.g.delayS}s after ${phaseLabel(plans.g.phase)} began, still in it`,
          stopped && inPhase(s, plans.g.phase),
          `at ${statusLine(s)}`,
        ),
      );
    },
  },
  h: {
    title: 'campaign terminated mid-step, then resumed',
    async inject(run) {
      const s = await arrive(run, plans.h.phase, plans.h.delayS, 'terminate and resume');
      if (!s) return;
      const terminated = driver.tbt('campaign', 'terminate', run.id);
      note(run, `tbt campaign terminate (${statusLine(s)}): ${terminated.ok ? 'ok' : 'FAILED'}`);
      await sleep(5000);
      const resumed = driver.tbt('campaign', 'resume', run.id);
      note(run, `tbt campaign resume: ${resumed.ok ? 'ok' : 'FAILED'}`);
      run.extra.push(
        injectedCheck(
          `terminated in ${phaseLabel(plans.h.phase)}, then resumed`,
          terminated.ok && resumed.ok && inPhase(s, plans.h.phase),
          `terminate: ${terminated.out.split('\n')[0]} | resume: ${resumed.out.split('\n').slice(0, 3).join(' ')}`,
        ),
      );
    },
  },
  i: {
    title: 'Postgres in recovery (57P03) for 2 minutes, overlapped steps',
    config: variantConfig('overlap'),
    async inject(run) {
      const recoveryMs = Number(opts['recovery-min']) * 60_000;
      const s = await arrive(run, plans.i.phase, plans.i.delayS, 'Postgres in recovery');
      if (!s) return;
      const codes = new Map<string, number>();
      const starting: string[] = [];
      let firstS: number | undefined;
      let lastS: number | undefined;
      let t0 = now();
      await withStackLock(async () => {
        try {
          t0 = now();
          await startInRecovery(env);
          note(run, `postgres restarted in recovery, hot_standby=off (${statusLine(s)})`);
          // Until the standby listens, connections are refused (ECONNREFUSED): the recovery counts from then.
          while (firstS === undefined && now() - t0 < 30_000) {
            const code = (await connectCode(env)) ?? 'connected';
            if (code.startsWith('57P03')) firstS = secs(now() - t0);
            else {
              starting.push(code);
              await sleep(500);
            }
          }
          while (firstS !== undefined && now() - t0 < firstS * 1000 + recoveryMs) {
            const code = (await connectCode(env)) ?? 'connected';
            codes.set(code, (codes.get(code) ?? 0) + 1);
            if (code.startsWith('57P03')) lastS = secs(now() - t0);
            await sleep(5000);
          }
        } finally {
          await endRecovery(env);
        }
      });
      const seen = [...codes].map(([c, n]) => `${n}x ${c}`).join(', ');
      note(run, `postgres out of recovery after ${secs(now() - t0)}s; ${seen}`);
      const after = await connectCode(env);
      run.extra.push(
        injectedCheck(
          `Postgres answered 57P03 for ${secs(recoveryMs)}s from ${plans.i.delayS}s into ` +
            `${phaseLabel(plans.i.phase)}, then connected`,
          inPhase(s, plans.i.phase) &&
            [...codes.keys()].every((c) => c.startsWith('57P03')) &&
            firstS !== undefined &&
            lastS !== undefined &&
            lastS - firstS >= secs(recoveryMs) - 10 &&
            after === undefined,
          `at ${statusLine(s)}; 57P03 from ${firstS ?? '-'}s to ${lastS ?? '-'}s; seen ${seen}` +
            `${starting.length ? ` (before it listened: ${starting.length}x ${starting[0]})` : ''}; ` +
            `afterwards ${after ?? 'connected'}`,
        ),
      );
    },
  },
  j: {
    title: 'checkpoint volume full at step 1 until the campaign pauses, then space freed',
    async setup() {
      // The learner reads the hook when it starts (at the first step), from the GPU worker's environment.
      await stopWorkers(env, ['gpu']);
      const hooks = JSON.stringify({ disk_full_saves: Number(opts['disk-full-saves']) });
      startWorkers(env, ['gpu'], { ...process.env, TBT_LEARNER_TEST_HOOKS: hooks });
      log(`  gpu worker started again with TBT_LEARNER_TEST_HOOKS=${hooks}`);
    },
    async teardown() {
      await stopWorkers(env, ['gpu']);
      startWorkers(env, ['gpu']);
    },
    async inject(run) {
      const folder = learnerFiles(env.TBT_STATE_DIR, run.id).checkpoints;
      const s = await arrive(run, plans.j.phase, 0, 'disk full at step 1');
      if (!s) return;
      let paused: string | undefined;
      let pausedAt = 0;
      let last: CampaignStatus | undefined;
      // The step's save fails and the campaign pauses at once; the paused stage's own retry saves it.
      while (!run.ended && now() - run.started < 40 * 60_000) {
        const q = await driver.status(run.id);
        if (q) last = q;
        if (!paused && q?.paused && /disk_full|does not fit/.test(q.pauseReason ?? '')) {
          paused = q.pauseReason ?? '';
          pausedAt = now();
          note(run, `paused: ${paused.slice(0, 200)}`);
        }
        if (q && (q.step >= 1 || q.stage !== 'train')) break;
        if ((await driver.describe(run.id)) !== 'RUNNING' && !q) break;
        await sleep(3000);
      }
      note(run, `after the pause: ${statusLine(last)}${paused ? ` (${secs(now() - pausedAt)}s after it)` : ''}`);
      const learnerLog = fs.existsSync(learnerFiles(env.TBT_STATE_DIR, run.id).log)
        ? fs.readFileSync(learnerFiles(env.TBT_STATE_DIR, run.id).log, 'utf8')
        : '';
      const trained = [...learnerLog.matchAll(/step 1 done:/g)].length;
      run.extra.push(
        injectedCheck(
          'step 1 checkpoint save failed with 507 disk_full until the campaign paused naming the folder',
          paused !== undefined && paused.includes(folder),
          paused ? `pause reason: ${paused.slice(0, 300)}` : `no disk_full pause; last ${statusLine(last)}`,
        ),
      );
      run.extra.push(
        check(
          'step 1 saved after the pause, trained once',
          fs.existsSync(path.join(folder, 'step-1')) && trained <= 1,
          `step-1 ${fs.existsSync(path.join(folder, 'step-1')) ? 'committed' : 'missing'}; learner log: ${trained} ` +
            "'step 1 done:' line(s)",
        ),
      );
    },
  },
  k: {
    title: 'every rollout worker gone for 10 minutes mid-step',
    async inject(run) {
      const outageMs = Number(opts['rollout-outage-min']) * 60_000;
      const s = await arrive(run, plans.k.phase, plans.k.delayS, 'rollout workers gone');
      if (!s) return;
      const { pid, exitS } = await stopWorker(run, 'rollout');
      const t0 = now();
      note(run, `rollout worker ${pid ?? '(none running)'} stopped (${statusLine(s)}), exited after ${exitS ?? '-'}s`);
      let pausedAfter: number | undefined;
      let reason = '';
      while (now() - t0 < outageMs && !run.ended) {
        const q = await driver.status(run.id);
        if (pausedAfter === undefined && q?.paused && (q.pauseReason ?? '').includes(ROLLOUT_QUEUE)) {
          pausedAfter = secs(now() - t0);
          reason = q.pauseReason ?? '';
          note(run, `paused naming the rollout queue: ${reason.slice(0, 160)}`);
        }
        await sleep(3000);
      }
      releaseWorker(run, 'rollout');
      note(run, `rollout worker started again after ${secs(now() - t0)}s`);
      run.extra.push(
        injectedCheck(
          `rollout worker stopped ${plans.k.delayS}s into ${phaseLabel(plans.k.phase)} for ${secs(outageMs)}s`,
          pid !== undefined && inPhase(s, plans.k.phase),
          `pid ${pid ?? '-'} at ${statusLine(s)}`,
        ),
      );
      run.extra.push(
        check(
          `the campaign paused naming the queue ${ROLLOUT_QUEUE}`,
          pausedAfter !== undefined,
          pausedAfter !== undefined
            ? `${pausedAfter}s after the worker stopped: ${reason}`
            : `no such pause within ${secs(outageMs)}s (Temporal lists a poller 5 min after its last poll, then ` +
                `the wait ${secs(config.recovery.rollout_queue_wait_ms ?? 0)}s)`,
        ),
      );
    },
  },
  l: {
    title: 'rollout worker SIGTERM mid-step (a deploy), started again; LoRA',
    config: opts['no-lora'] ? undefined : variantConfig('lora'),
    async inject(run) {
      const s = await arrive(run, plans.l.phase, plans.l.delayS, 'rollout worker SIGTERM');
      if (!s) return;
      const { pid, exitS } = await stopWorker(run, 'rollout');
      note(run, `rollout worker ${pid ?? '-'} SIGTERM (${statusLine(s)}), exited after ${exitS ?? '>120'}s`);
      await sleep(10_000);
      releaseWorker(run, 'rollout');
      note(run, 'rollout worker started again');
      run.extra.push(
        injectedCheck(
          `rollout worker SIGTERM ${plans.l.delayS}s into ${phaseLabel(plans.l.phase)}, exiting within the drain`,
          pid !== undefined &&
            exitS !== undefined &&
            inPhase(s, plans.l.phase) &&
            exitS <= env.TBT_ROLLOUT_DRAIN_S + 30,
          `pid ${pid ?? '-'} at ${statusLine(s)}; exited after ${exitS ?? '>120'}s (drain ` +
            `${env.TBT_ROLLOUT_DRAIN_S}s)`,
        ),
      );
    },
  },
  m: {
    title: 'rollout worker SIGKILL between the turns of an episode (an OOM kill); it resumes at its last turn',
    async inject(run) {
      const s = await arrive(run, plans.m.phase, plans.m.delayS, 'rollout worker SIGKILL inside an episode');
      if (!s) return;
      // Held down from here, so that the waiting loop does not restart it before its saved turns are read.
      held.add('rollout');
      try {
        const url = databaseUrl(env);
        const live = await waitForLiveSavedTurn(url, run.id, resumeState.dead, 180_000, () => run.ended);
        const pid = live ? workerPid(env, 'rollout') : undefined;
        if (pid !== undefined) process.kill(pid, 'SIGKILL');
        resumeState.kills.push({ killed: pid === undefined ? [] : [`rollout worker ${pid}`] });
        const found = pid === undefined ? [] : await interruptedNow(url, run.id, 1, resumeState.dead);
        resumeState.interruptions.push(...found);
        note(
          run,
          `rollout worker ${pid ?? '(not killed: no running episode saved a turn)'} SIGKILL; interrupted ` +
            (found.map((i) => `${i.episodeId.slice(run.id.length + 1)} (${i.savedTurns} saved)`).join(', ') || 'none'),
        );
        await sleep(1000);
      } finally {
        releaseWorker(run, 'rollout');
      }
    },
    async after(run) {
      const r = await checkResumed(databaseUrl(env), run.id, resumeState.kills, resumeState.interruptions);
      run.extra.push(...r.checks);
      note(
        run,
        resumeLine(
          r.tally,
          r.checks.every((c) => c.pass),
        ),
      );
    },
  },
};

/**
 * A bookkeeping worker with a state folder of its own, empty: anything a later stage reads from a file an earlier
 * stage wrote on another worker fails. DATABASE_URL is set as a deployment sets it (the local password file lives
 * in the stack's state folder).
 */
function startFreshBookkeeping(): { env: typeof env; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-fresh-bookkeeping-'));
  const overrides = { TBT_STATE_DIR: dir, DATABASE_URL: databaseUrl(env) };
  const processEnv = { ...process.env, ...overrides };
  const freshEnv = readEnvironment(processEnv);
  startWorkers(freshEnv, ['bookkeeping'], processEnv);
  return { env: freshEnv, dir };
}

interface FaultRunSummary extends RunSummary {
  scenario: Letter | 'baseline';
  title: string;
  points: string[];
  pauses: string[];
}

/** Brings back what a scenario left down, so the next run starts on a whole stack; what a run beside it holds
 * down on purpose (a worker, the endpoint) stays down. */
async function restoreStack(): Promise<void> {
  if (!outageOn) await policy?.proxy.open();
  clearRecoverySignal(env);
  await withStackLock(() => startPostgres(env));
  startWorkers(
    env,
    workerKinds.filter((k) => !held.has(k)),
  );
}

type Checked = Awaited<ReturnType<typeof runBaseline>>;

/** One scenario's run, checked against the baseline; `idle` is called when its campaign idles, and again when it
 * ends (the partner of a run whose fault never came still starts, after it). */
async function runScenario(letter: Letter, baseline: () => Promise<Checked>, idle: () => void) {
  const scenario = scenarios[letter];
  const id = `fault-${letter}-${stamp}`;
  log(`run ${id}: (${letter}) ${scenario.title}`);
  const configFile = scenario.externalPolicy ? (await externalPolicy()).configFile : (scenario.config ?? opts.config!);
  if (scenario.config) log(`  config ${configFile}`);
  const run: FaultRun = { id, started: now(), idle, points: [], extra: [], ended: false };
  await scenario.setup?.();
  run.started = await startRun(configFile, id);
  const injection = scenario.inject(run).catch((err: unknown) => {
    run.extra.push(injectedCheck(scenario.title, false, `the injection failed: ${String(err)}`));
  });
  const end = await driver.waitForEnd(id, run.started, { heldDown: () => held, until: injection });
  run.ended = true;
  idle();
  await injection;
  await scenario.after?.(run);
  await scenario.teardown?.();
  await restoreStack();
  // A run that timed out is ended here, so that it cannot overlap the runs after it.
  if ((await driver.describe(id)) === 'RUNNING') driver.tbt('campaign', 'terminate', id, '--reason', 'fault suite');
  if (env.TBT_WORKER_DEPLOYMENT_NAME) run.extra.push(await pinnedCheck(id, env.TBT_WORKER_DEPLOYMENT_NAME));
  const { summary } = await finishRun(suite, {
    name: `(${letter})`,
    id,
    started: run.started,
    end,
    baseline: (await baseline()).f,
    extra: run.extra,
  });
  return { ...summary, scenario: letter, title: scenario.title, points: run.points, pauses: end.pauses };
}

/**
 * With Worker Versioning on (TBT_WORKER_DEPLOYMENT_NAME, the deploy shape): the campaign and every training step
 * ran pinned to a build of that deployment, so a fault met the versioned path and not the unversioned one.
 */
async function pinnedCheck(id: string, deploymentName: string): Promise<Check> {
  const client = await driver.temporal();
  const ids = [id, ...Array.from({ length: STEPS }, (_, i) => `${id}/step-${i + 1}`)];
  const builds = await Promise.all(
    ids.map(async (wid) => {
      const info = (await client.workflow.getHandle(wid).describe()).raw.workflowExecutionInfo;
      const version = info?.versioningInfo?.deploymentVersion;
      return version?.deploymentName === deploymentName ? version.buildId : undefined;
    }),
  );
  const unpinned = ids.filter((_, i) => !builds[i]);
  return check(
    `the campaign and its ${STEPS} steps ran pinned to a build of deployment ${deploymentName}`,
    unpinned.length === 0,
    unpinned.length ? `not pinned: ${unpinned.join(', ')}` : `builds ${[...new Set(builds)].join(', ')}`,
  );
}

/** A scenario's run, or, when it could not run at all, a failed one: the others still run. */
async function guardedScenario(
  letter: Letter,
  baseline: () => Promise<Checked>,
  idle: () => void,
): Promise<FaultRunSummary> {
  try {
    return await runScenario(letter, baseline, idle);
  } catch (err) {
    idle();
    log(`  (${letter}) could not run: ${String(err)}`);
    await scenarios[letter].teardown?.().catch(() => undefined);
    await restoreStack().catch(() => undefined);
    return {
      ...{ run: `(${letter})`, campaignId: `fault-${letter}-${stamp}`, wallS: 0, realUpdates: 0 },
      ...{ retrainedBeforeCommit: 0, checks: [check(`scenario ${letter} ran`, false, String(err))], passed: false },
      ...{ scenario: letter, title: scenarios[letter].title, points: [], pauses: [] },
    };
  }
}

/**
 * Runs that share the suite's time, so that it fits in an hour on 2 cores: the partner starts once its primary's
 * policy endpoint is closed, when the primary's campaign only waits for the outage to end (its episodes retry
 * against a closed port), so two campaigns compute at once only briefly. Partners fault nothing the primary
 * uses: the baseline and (h) touch only their own campaign, and (f)'s fresh bookkeeping worker serves both
 * campaigns alike. d, e and g fault the whole stack and run alone.
 */
const PARTNERS: Partial<Record<Letter, Letter | 'baseline'>> = { a: 'baseline', b: 'f', c: 'h' };

// The suite's vLLM server runs in a process group of its own: an interrupted suite must not leave it behind.
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => {
    void (policy?.server.stop() ?? Promise.resolve()).finally(() => process.exit(130));
  });

async function main(): Promise<number> {
  const letters = (opts.only ? opts.only.split(',') : Object.keys(scenarios)) as Letter[];
  for (const l of letters)
    if (!(l in scenarios))
      throw new Error(`--only: unknown scenario ${l} (one of ${Object.keys(scenarios).join(',')})`);
  log(
    `seed ${seed} (repeat with --seed ${seed}); config ${opts.config}; state ${env.TBT_STATE_DIR}; queue prefix ` +
      `${env.TBT_TASK_QUEUE_PREFIX}; scenarios ${letters.join(',')}; worker versioning ` +
      (env.TBT_WORKER_DEPLOYMENT_NAME ? `on (deployment ${env.TBT_WORKER_DEPLOYMENT_NAME})` : 'off'),
  );
  await withStackLock(async () => driver.stackUp());
  const suiteStarted = now();
  let baselineRun: Promise<Checked> | undefined;
  const baseline = () =>
    (baselineRun ??= opts.baseline
      ? reuseBaseline(suite, opts.baseline)
      : runBaseline(suite, opts.config!, `fault-baseline-${stamp}`));
  const partnerOf = (l: Letter) => {
    const p = opts.sequential ? undefined : PARTNERS[l];
    return p === 'baseline' ? (opts.baseline ? undefined : p) : p && letters.includes(p) ? p : undefined;
  };
  const partners = new Set(letters.map(partnerOf).filter(Boolean));
  const scenarioRuns: FaultRunSummary[] = [];
  try {
    if (!partners.has('baseline')) await baseline();
    for (const letter of letters.filter((l) => !partners.has(l))) {
      const partner = partnerOf(letter);
      let partnerRun: Promise<unknown> | undefined;
      const startPartner = () => {
        if (!partner || partnerRun) return;
        log(`  (${letter}) idles: its partner ${partner === 'baseline' ? 'the baseline' : `(${partner})`} starts`);
        partnerRun =
          partner === 'baseline'
            ? baseline()
            : guardedScenario(partner, baseline, () => undefined).then((r) => scenarioRuns.push(r));
      };
      scenarioRuns.push(await guardedScenario(letter, baseline, startPartner));
      await partnerRun;
    }
  } finally {
    await policy?.proxy.close();
    await policy?.server.stop();
    await driver.close();
  }
  const base = await baseline();
  const runs: FaultRunSummary[] = [
    { ...base.summary, scenario: 'baseline', title: 'uninterrupted', points: [], pauses: [] },
    ...letters.flatMap((l) => scenarioRuns.filter((r) => r.scenario === l)),
  ];

  const minutes = Math.round((now() - suiteStarted) / 6000) / 10;
  console.log(`\nfault suite, seed ${seed}, ${minutes} minutes in all`);
  printTable(
    ['run', 'fault', 'points', 'pauses seen', 'wall s', 'real updates', 'checks'],
    runs.map((r) => [
      r.run,
      r.title,
      r.points.join('; ') || '-',
      r.pauses.length ? `${r.pauses.length}: ${r.pauses[0]!.slice(0, 60)}...` : '-',
      String(r.wallS),
      `${r.realUpdates}/${STEPS}`,
      checksCell(r),
    ]),
  );
  const failed = suiteFailures(runs, STEPS);
  const passed = scenarioRuns.filter((r) => r.passed).length;
  writeSummary(path.join(outDir, 'summary.json'), {
    seed,
    config: opts.config,
    stamp,
    minutes,
    workerDeployment: env.TBT_WORKER_DEPLOYMENT_NAME ?? null,
    passed: failed.length === 0,
    runs,
  });
  if (failed.length) console.log(`\nFAILED (${failed.length}):\n${failed.map((f) => `  ${f}`).join('\n')}`);
  console.log(
    `faults: scenarios=${scenarioRuns.length} passed=${passed} failed=${scenarioRuns.length - passed} ` +
      `minutes=${minutes}`,
  );
  return failed.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);

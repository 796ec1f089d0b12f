/**
 * Kill -9 crash suite (on demand, not part of `npm test`): `npm run test:crash [-- --seed N --only a,b --baseline ID]`.
 *
 * Runs the 4-step campaign of config/crash-test.yaml (tiny suite, the bundled SmolLM2-135M on CPU, real learner
 * updates) once uninterrupted as the baseline, then once per victim: the rollout worker, the GPU worker together
 * with its learner (torchrun and its rank 0), the orchestrator worker, the Temporal dev server. Each victim gets
 * SIGKILL at a seeded random point (a random delay after the campaign enters a random phase: the probe, one of the
 * training steps, the evaluation after training or the report; `--phases train` for training steps only), is
 * restarted (`tbt workers up` / `tbt up`), and the campaign must complete. Checks per run, each PASS/FAIL:
 * completion, one campaign_steps row per step 1..4, the learner's checkpoint lineage (one update per step, each
 * on its predecessor, on exactly the recorded episodes), the per-step training episode keys equal the baseline's,
 * and no episode counted twice. Exit 1 if any check fails; summary in $TBT_STATE_DIR/crash-test/summary.json.
 *
 * Uses the servers and workers of the current environment (TBT_STATE_DIR, TBT_TEMPORAL_PORT, TBT_PG_PORT,
 * TBT_TASK_QUEUE_PREFIX): isolate it from other work with those variables.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, type Connection } from '@temporalio/client';
import { databaseUrl, readEnvironment, repoRoot } from '../config/environment.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import type { StepRecord } from '../activities/campaign-activities.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { mulberry32 } from '../core/metrics.ts';
import { withClient } from '../infra/control-database.ts';
import { isAlive, readPid } from '../infra/daemon.ts';
import { workerPid } from '../infra/local-workers.ts';
import { startCampaign } from '../cli/commands/campaign.ts';
import { statusQuery, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';

const { values: opts } = parseArgs({
  options: {
    config: { type: 'string', default: path.join(repoRoot, 'config', 'crash-test.yaml') },
    seed: { type: 'string' },
    only: { type: 'string' },
    baseline: { type: 'string' },
    'timeout-min': { type: 'string', default: '25' },
    'keep-checkpoints': { type: 'boolean', default: false },
    phases: { type: 'string', default: 'all' },
  },
});

const env = readEnvironment();
const controlUrl = databaseUrl(env);
const config = loadCampaignConfig(opts.config!);
const STEPS = config.training.steps;
const PER_STEP = config.training.groups_per_step * config.training.group_size;
const seed = opts.seed !== undefined ? Number(opts.seed) : Math.floor(Date.now() % 1_000_000);
const runTimeoutMs = Number(opts['timeout-min']) * 60_000;
const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
const outDir = path.join(env.TBT_STATE_DIR, 'crash-test');
fs.mkdirSync(outDir, { recursive: true });

type Victim = 'rollout' | 'gpu' | 'orchestrator' | 'temporal';
const allVictims: Victim[] = ['rollout', 'gpu', 'orchestrator', 'temporal'];
/** Seconds after the chosen training step starts; the rollout window is where episodes are in flight. */
const delayWindow: Record<Victim, [number, number]> = {
  rollout: [2, 25],
  gpu: [5, 60],
  orchestrator: [0, 60],
  temporal: [0, 60],
};

/**
 * Where a kill may land: a training step, or (with --phases all) the probe, the evaluation after training,
 * the report.
 */
type Phase = { kind: 'step'; step: number } | { kind: 'probe' | 'evaluate-after' | 'report' };
const STAGE_ORDER = ['ingest', 'probe', 'evaluate-before', 'train', 'evaluate-after', 'report', 'done'];
/** Seconds after the phase begins, for phases other than training steps (they are shorter). */
const phaseWindow = { probe: [2, 30], 'evaluate-after': [1, 20], report: [0, 3] } as const;
const phaseLabel = (p: Phase) => (p.kind === 'step' ? `training step ${p.step}` : p.kind);

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

/**
 * True once the campaign is in (or past) the phase. A training step runs while the status says stage 'train',
 * step = n - 1.
 */
function reached(s: CampaignStatus, phase: Phase): boolean {
  if (phase.kind === 'step')
    return (s.stage === 'train' && s.step >= phase.step - 1) || s.step >= phase.step || s.stage === 'done';
  return STAGE_ORDER.indexOf(s.stage) >= STAGE_ORDER.indexOf(phase.kind);
}

// A seeded RNG, so a failing run can be repeated with --seed.
const random = mulberry32(seed);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => Date.now();
const secs = (ms: number) => Math.round(ms / 100) / 10;
const log = (msg: string) => console.log(`[crash ${new Date().toISOString().slice(11, 19)}] ${msg}`);

function tbt(...args: string[]): { ok: boolean; out: string; seconds: number } {
  const started = now();
  const r = spawnSync(path.join(repoRoot, 'bin', 'tbt'), args, {
    cwd: repoRoot,
    env: process.env,
    encoding: 'utf8',
    timeout: 300_000,
  });
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`.trim();
  return { ok: r.status === 0, out, seconds: secs(now() - started) };
}

// --- Temporal client that survives a server restart -------------------------------------------------------
let connection: Connection | undefined;
let client: Client | undefined;
async function temporal(): Promise<Client> {
  if (!client) {
    connection = await connectTemporalClient(env, 3000);
    client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
  }
  return client;
}
async function resetTemporal(): Promise<void> {
  const c = connection;
  connection = undefined;
  client = undefined;
  await c?.close().catch(() => undefined);
}
async function campaignStatus(id: string): Promise<CampaignStatus | undefined> {
  try {
    return await (await temporal()).workflow.getHandle(id).query(statusQuery);
  } catch {
    await resetTemporal();
    return undefined;
  }
}
async function describe(id: string): Promise<string | undefined> {
  try {
    return (await (await temporal()).workflow.getHandle(id).describe()).status.name;
  } catch {
    await resetTemporal();
    return undefined;
  }
}

/** Waits until the campaign's workflow chain ends; returns its final status name and result. */
async function waitForEnd(
  id: string,
  started: number,
): Promise<{ status: string; result?: CampaignStatus; workerRestarts: string[] }> {
  const workerRestarts: string[] = [];
  let lastLine = '';
  while (now() - started < runTimeoutMs) {
    const s = await describe(id);
    if (s && s !== 'RUNNING' && s !== 'CONTINUED_AS_NEW') {
      const result =
        s === 'COMPLETED' ? ((await (await temporal()).workflow.getHandle(id).result()) as CampaignStatus) : undefined;
      return { status: s, result, workerRestarts };
    }
    const q = await campaignStatus(id);
    const line = q ? `stage ${q.stage} step ${q.step}/${q.steps}` : 'status unavailable';
    if (line !== lastLine) log(`  ${id}: ${line}`);
    lastLine = line;
    // A worker that died after the restart is a finding: note it, then bring it back so the run can end.
    for (const kind of ['orchestrator', 'rollout', 'gpu'] as const) {
      if (workerPid(env, kind) === undefined) {
        log(`  WARNING: the ${kind} worker is not running; restarting it`);
        workerRestarts.push(`${kind}@${secs(now() - started)}s`);
        tbt('workers', 'up');
      }
    }
    await sleep(3000);
  }
  return { status: 'TIMED_OUT (hang?)', workerRestarts };
}

// --- Facts about a finished campaign --------------------------------------------------------------------
interface Facts {
  steps: Map<number, StepRecord>;
  stepRows: number[];
  /** campaign-independent training keys per step: `step-<n>/<uid>#<rep>` */
  keys: Map<number, string[]>;
}

async function facts(id: string): Promise<Facts> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ step: number; record: StepRecord }>(
      'SELECT step, record FROM campaign_steps WHERE campaign = $1 ORDER BY step',
      [id],
    ),
  );
  const steps = new Map(rows.map((r) => [r.step, r.record]));
  const keys = new Map(
    rows.map((r) => [
      r.step,
      r.record.groups
        .flatMap((g) => g.episodeIds)
        .map((e) => (e.startsWith(`${id}/`) ? e.slice(id.length + 1) : `!foreign:${e}`))
        .sort(),
    ]),
  );
  return { steps, stepRows: rows.map((r) => r.step), keys };
}

interface Check {
  name: string;
  pass: boolean;
  detail: string;
}

const sha256 = (data: string | Buffer) => crypto.createHash('sha256').update(data).digest('hex');

const check = (name: string, pass: boolean, detail: string): Check => ({ name, pass, detail });
type LearnerFiles = ReturnType<typeof learnerFiles>;
type RunEnd = Awaited<ReturnType<typeof waitForEnd>>;

function completionChecks(end: RunEnd): Check[] {
  return [
    check(
      'campaign completed',
      end.status === 'COMPLETED' && end.result?.stage === 'done' && end.result.step === STEPS,
      `workflow ${end.status}, stage ${end.result?.stage ?? '-'}, step ${end.result?.step ?? '-'}/${STEPS}`,
    ),
    check(
      'no worker died after the restart',
      end.workerRestarts.length === 0,
      end.workerRestarts.length ? `restarted during the wait: ${end.workerRestarts.join(', ')}` : 'none',
    ),
  ];
}

/** Steps of the committed learner checkpoints (step-<n> directories), ascending. */
function checkpointSteps(files: LearnerFiles): number[] {
  return fs.existsSync(files.checkpoints)
    ? fs
        .readdirSync(files.checkpoints)
        .filter((d) => /^step-\d+$/.test(d))
        .map((d) => Number(d.slice(5)))
        .sort((a, b) => a - b)
    : [];
}

/** Each checkpoint's manifest names its parent step and the parent's manifest hash. */
function lineageCheck(files: LearnerFiles, dirs: number[]): Check {
  const lineageProblems: string[] = [];
  for (const n of dirs) {
    const manifest = JSON.parse(
      fs.readFileSync(path.join(files.checkpoints, `step-${n}`, 'manifest.json'), 'utf8'),
    ) as { step: number; parent_step?: number | null; parent_manifest_sha256?: string | null };
    if (manifest.parent_step === undefined)
      lineageProblems.push(`step-${n}: manifest records no parent_step (learner without lineage recording?)`);
    else if (manifest.parent_step !== n - 1)
      lineageProblems.push(`step-${n}: parent_step ${manifest.parent_step}, expected ${n - 1}`);
    const parentManifest = path.join(files.checkpoints, `step-${n - 1}`, 'manifest.json');
    const want = n > 1 && fs.existsSync(parentManifest) ? sha256(fs.readFileSync(parentManifest)) : null;
    if ((manifest.parent_manifest_sha256 ?? null) !== want)
      lineageProblems.push(
        `step-${n}: parent manifest hash ${manifest.parent_manifest_sha256 ?? 'null'} is not that of step-${n - 1} ` +
          `(${want ?? 'null'})`,
      );
  }
  return check(
    'lineage: every checkpoint applied on its predecessor',
    dirs.length > 0 && lineageProblems.length === 0,
    lineageProblems.join('; ') ||
      `step-1 <- base, ${dirs
        .slice(1)
        .map((n) => `step-${n} <- step-${n - 1}`)
        .join(', ')}`,
  );
}

interface TrainerState {
  last_step: number;
  trajectories_seen: number;
  ledger: Record<
    string,
    { step_id: number; parent_step?: number; batch_ids_sha256?: string; trajectories: number; skipped: boolean }
  >;
}

/** Problems of the last checkpoint's ledger against campaign_steps, and its count of real (non-skipped) updates. */
function ledgerProblemsOf(state: TrainerState, f: Facts, expected: number[]): { problems: string[]; real: number } {
  const ledgerProblems: string[] = [];
  let realUpdates = 0;
  const ledgerSteps = Object.keys(state.ledger)
    .map(Number)
    .sort((a, b) => a - b);
  if (JSON.stringify(ledgerSteps) !== JSON.stringify(expected))
    ledgerProblems.push(`ledger steps [${ledgerSteps.join(', ')}]`);
  let trajectories = 0;
  for (const n of ledgerSteps) {
    const e = state.ledger[String(n)]!;
    trajectories += e.trajectories;
    if (!e.skipped) realUpdates += 1;
    if (e.parent_step !== n - 1) ledgerProblems.push(`ledger ${n}: parent_step ${e.parent_step}`);
    const record = f.steps.get(n);
    const want = record
      ? sha256(
          record.groups
            .flatMap((g) => g.episodeIds)
            .sort()
            .join('\n'),
        )
      : undefined;
    if (e.batch_ids_sha256 !== want)
      ledgerProblems.push(`ledger ${n}: the learner trained on other episodes than campaign_steps records`);
    if (record && !record.checkpoint.endsWith(`step-${n}`))
      ledgerProblems.push(`record ${n}: checkpoint ${record.checkpoint}`);
  }
  const recorded = [...f.steps.values()].reduce((a, r) => a + r.groups.reduce((b, g) => b + g.episodeIds.length, 0), 0);
  if (state.trajectories_seen !== trajectories || trajectories !== recorded)
    ledgerProblems.push(
      `trajectories_seen ${state.trajectories_seen}, ledger sum ${trajectories}, recorded episodes ${recorded}`,
    );
  return { problems: ledgerProblems, real: realUpdates };
}

/** The final ledger has every step once, applied on its predecessor, on the recorded episodes. */
function ledgerCheck(
  files: LearnerFiles,
  dirs: number[],
  f: Facts,
  expected: number[],
): { check: Check; realUpdates: number } {
  let realUpdates = 0;
  const last = dirs.at(-1);
  const ledgerProblems: string[] = [];
  if (last === undefined) ledgerProblems.push('no checkpoint');
  else {
    const state = JSON.parse(
      fs.readFileSync(path.join(files.checkpoints, `step-${last}`, 'trainer_state.json'), 'utf8'),
    ) as TrainerState;
    const ledger = ledgerProblemsOf(state, f, expected);
    ledgerProblems.push(...ledger.problems);
    realUpdates = ledger.real;
  }
  return {
    check: check(
      'ledger: one update per step, on the recorded episodes, none twice',
      ledgerProblems.length === 0,
      ledgerProblems.join('; ') ||
        `ledger steps 1..${STEPS}, batch hashes match campaign_steps, ${realUpdates} real (non-skipped) update(s)`,
    ),
    realUpdates,
  };
}

/** Steps trained again from the previous checkpoint after a kill before the commit (expected, not applied twice). */
function retrainedSteps(files: LearnerFiles): number {
  const learnerLog = fs.existsSync(files.log) ? fs.readFileSync(files.log, 'utf8') : '';
  const trainedLines = [...learnerLog.matchAll(/step (\d+) done:/g)].map((m) => Number(m[1]));
  return trainedLines.length - new Set(trainedLines).size;
}

/** Episodes: per-step keys, uniqueness, every recorded one stored once and graded, nothing extra counted. */
async function episodeChecks(id: string, f: Facts): Promise<Check[]> {
  const all = [...f.steps.values()].flatMap((r) => r.groups.flatMap((g) => g.episodeIds));
  const dupes = all.filter((e, i) => all.indexOf(e) !== i);
  const sizes = [...f.steps.values()].map((r) => r.groups.reduce((a, g) => a + g.episodeIds.length, 0));
  const batches = check(
    'no episode id in two groups/steps; full batches',
    dupes.length === 0 && sizes.every((s) => s === PER_STEP),
    dupes.length
      ? `duplicates: ${dupes.join(', ')}`
      : `${all.length} distinct training episodes, per step [${sizes.join(', ')}] (expected ${PER_STEP})`,
  );
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ id: string; status: string; step: number | null }>(
      `SELECT id, status, step FROM episodes WHERE campaign = $1 AND purpose = 'train'`,
      [id],
    ),
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  const missing = all.filter((e) => !byId.has(e));
  const badStatus = all.filter((e) => byId.has(e) && !['success', 'agent_failure'].includes(byId.get(e)!.status));
  const recordedSet = new Set(all);
  const extra = rows.filter((r) => !recordedSet.has(r.id));
  const leaked = [...f.steps.values()].reduce((a, r) => a + r.leakedInfraEpisodes, 0);
  const stored = check(
    'episode rows: each trained episode stored once, graded, none extra',
    missing.length === 0 && badStatus.length === 0 && extra.length === 0 && leaked === 0,
    [
      missing.length ? `missing rows: ${missing.join(', ')}` : '',
      badStatus.length ? `not graded: ${badStatus.map((e) => `${e}=${byId.get(e)!.status}`).join(', ')}` : '',
      extra.length ? `train rows not in any step: ${extra.map((r) => `${r.id}=${r.status}`).join(', ')}` : '',
      leaked ? `leaked infra episodes ${leaked}` : '',
    ]
      .filter(Boolean)
      .join('; ') || `${rows.length} train rows = ${all.length} recorded episodes, all graded, 0 leaked`,
  );
  return [batches, stored];
}

function baselineKeysCheck(f: Facts, baseline: Facts, expected: number[]): Check {
  const diffs: string[] = [];
  for (const n of expected) {
    const a = baseline.keys.get(n) ?? [];
    const b = f.keys.get(n) ?? [];
    if (JSON.stringify(a) !== JSON.stringify(b)) diffs.push(`step ${n}: baseline [${a.join(' ')}] vs [${b.join(' ')}]`);
  }
  return check(
    'training episode keys per step = baseline',
    diffs.length === 0,
    diffs.join('; ') || `${expected.map((n) => `step ${n}: ${(f.keys.get(n) ?? []).join(' ')}`).join(' | ')}`,
  );
}

async function checks(
  id: string,
  end: RunEnd,
  baseline?: Facts,
): Promise<{ list: Check[]; f: Facts; realUpdates: number; retrained: number }> {
  const list: Check[] = completionChecks(end);
  const f = await facts(id);
  const expected = Array.from({ length: STEPS }, (_, i) => i + 1);
  list.push(
    check(
      'campaign_steps: exactly steps 1..N, one row each',
      JSON.stringify(f.stepRows) === JSON.stringify(expected),
      `rows for steps [${f.stepRows.join(', ')}]`,
    ),
  );

  // Learner lineage: checkpoints step-1..N, each manifest names its parent (and the parent's manifest hash),
  // the final ledger has every step once, applied on its predecessor, on the recorded episodes.
  const files = learnerFiles(env.TBT_STATE_DIR, id);
  const dirs = checkpointSteps(files);
  list.push(
    check(
      'learner checkpoints: exactly step-1..N',
      JSON.stringify(dirs) === JSON.stringify(expected),
      `committed: [${dirs.join(', ')}] in ${files.checkpoints}`,
    ),
  );
  list.push(lineageCheck(files, dirs));
  const ledger = ledgerCheck(files, dirs, f, expected);
  list.push(ledger.check);
  const retrained = retrainedSteps(files);

  list.push(...(await episodeChecks(id, f)));
  if (baseline) list.push(baselineKeysCheck(f, baseline, expected));
  return { list, f, realUpdates: ledger.realUpdates, retrained };
}

/**
 * A run's learner checkpoints are about 8.5 GB (4 x 1.6 GB of weights + AdamW state, 4 x 0.5 GB of exports): once
 * checked, keep only the small lineage files (manifest.json, trainer_state.json) and the logs, or a few runs fill
 * the disk (seen: a full disk made the learner's checkpoint write fail).
 */
function pruneCheckpoints(id: string): void {
  if (opts['keep-checkpoints']) return;
  const { checkpoints } = learnerFiles(env.TBT_STATE_DIR, id);
  if (!fs.existsSync(checkpoints)) return;
  fs.rmSync(path.join(checkpoints, 'exports'), { recursive: true, force: true });
  for (const entry of fs.readdirSync(checkpoints, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && (entry.name.endsWith('.distcp') || /^rng-rank\d+\.pt$/.test(entry.name)))
      fs.rmSync(path.join(entry.parentPath, entry.name), { force: true });
  }
}

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
  if (victim === 'temporal') {
    const up = tbt('up');
    outs.push(up.out);
    if (!up.ok) throw new Error(`tbt up failed:\n${up.out}`);
  }
  const workers = tbt('workers', 'up');
  outs.push(workers.out);
  if (!workers.ok) throw new Error(`tbt workers up failed:\n${workers.out}`);
  return { seconds: secs(now() - started), out: outs.join('\n') };
}

interface RunSummary {
  run: string;
  campaignId: string;
  victim: Victim | 'none';
  killPoint?: { phase: string; delayS: number; observed: string; killed: string[] };
  restartS?: number;
  wallS: number;
  realUpdates: number;
  retrainedBeforeCommit: number;
  checks: Check[];
  passed: boolean;
}

async function runCampaign(victim: Victim | 'none', baseline?: Facts): Promise<{ summary: RunSummary; f: Facts }> {
  const campaignId = `crash-${victim === 'none' ? 'baseline' : victim}-${stamp}`;
  let killPoint: RunSummary['killPoint'];
  let restartS: number | undefined;
  const plan = victim === 'none' ? undefined : drawPlan(victim);
  const what = plan
    ? `kill -9 ${victim} ${plan.delayS}s after ${phaseLabel(plan.phase)} starts`
    : 'uninterrupted baseline';
  log(`run ${campaignId}: ${what}`);
  const started = now();
  await startCampaign(opts.config!, { wait: false, id: campaignId });
  if (plan && victim !== 'none') {
    for (;;) {
      if (now() - started > runTimeoutMs) throw new Error(`${campaignId}: ${phaseLabel(plan.phase)} never started`);
      const s = await campaignStatus(campaignId);
      if (s && reached(s, plan.phase)) break;
      await sleep(1000);
    }
    await sleep(plan.delayS * 1000);
    const s = await campaignStatus(campaignId);
    const observed = s ? `stage ${s.stage}, step ${s.step} done` : 'status unavailable';
    const killed = killVictim(victim, campaignId);
    killPoint = { phase: phaseLabel(plan.phase), delayS: plan.delayS, observed, killed };
    log(`  killed at ${secs(now() - started)}s (${observed}): ${killed.join(', ') || 'nothing was running!'}`);
    await sleep(1000);
    const r = restart(victim);
    restartS = r.seconds;
    log(`  restarted in ${r.seconds}s: ${r.out.replace(/\n/g, ' | ')}`);
  }
  const end = await waitForEnd(campaignId, started);
  const wallS = secs(now() - started);
  const { list, f, realUpdates, retrained } = await checks(campaignId, end, baseline);
  if (!end.status.startsWith('TIMED_OUT')) pruneCheckpoints(campaignId); // a hung run keeps its files for diagnosis
  if (plan && killPoint && killPoint.killed.length === 0)
    list.push({ name: 'the victim was killed', pass: false, detail: 'no process to kill at the chosen point' });
  for (const c of list) log(`  ${c.pass ? 'PASS' : 'FAIL'} ${c.name}: ${c.detail}`);
  const summary: RunSummary = {
    run: victim === 'none' ? 'baseline' : `kill ${victim}`,
    campaignId,
    victim,
    killPoint,
    restartS,
    wallS,
    realUpdates,
    retrainedBeforeCommit: retrained,
    checks: list,
    passed: list.every((c) => c.pass),
  };
  return { summary, f };
}

async function baselineFromId(id: string): Promise<{ summary: RunSummary; f: Facts }> {
  const end = {
    status: (await describe(id)) ?? 'UNKNOWN',
    result: (await (
      await temporal()
    ).workflow
      .getHandle(id)
      .result()
      .catch(() => undefined)) as CampaignStatus | undefined,
    workerRestarts: [],
  };
  const { list, f, realUpdates, retrained } = await checks(id, end);
  for (const c of list) log(`  ${c.pass ? 'PASS' : 'FAIL'} ${c.name}: ${c.detail}`);
  return {
    summary: {
      run: 'baseline (reused)',
      campaignId: id,
      victim: 'none',
      wallS: 0,
      realUpdates,
      retrainedBeforeCommit: retrained,
      checks: list,
      passed: list.every((c) => c.pass),
    },
    f,
  };
}

async function main(): Promise<number> {
  const victims = opts.only === 'none' ? [] : opts.only ? (opts.only.split(',') as Victim[]) : allVictims;
  for (const v of victims)
    if (!allVictims.includes(v)) throw new Error(`--only: unknown victim ${v} (one of ${allVictims.join(', ')})`);
  log(
    `seed ${seed} (repeat with --seed ${seed}); config ${opts.config}; state ${env.TBT_STATE_DIR}; queue prefix ` +
      `${env.TBT_TASK_QUEUE_PREFIX}; victims ${victims.join(', ')}`,
  );
  const up = tbt('up');
  if (!up.ok) throw new Error(`tbt up failed:\n${up.out}`);
  const workers = tbt('workers', 'up');
  if (!workers.ok) throw new Error(`tbt workers up failed:\n${workers.out}`);
  const suiteStarted = now();
  const runs: RunSummary[] = [];
  const base = opts.baseline ? await baselineFromId(opts.baseline) : await runCampaign('none');
  runs.push(base.summary);
  for (const victim of victims) runs.push((await runCampaign(victim, base.f)).summary);
  await resetTemporal();

  console.log(`\ncrash suite, seed ${seed}, ${secs(now() - suiteStarted)}s in all`);
  const header = ['run', 'kill point', 'killed', 'restart s', 'wall s', 'real updates', 'checks'];
  const table = runs.map((r) => [
    r.run,
    r.killPoint ? `${r.killPoint.phase} +${r.killPoint.delayS}s (${r.killPoint.observed})` : '-',
    r.killPoint?.killed.join(', ') || '-',
    r.restartS === undefined ? '-' : String(r.restartS),
    String(r.wallS),
    `${r.realUpdates}/${STEPS}`,
    `${r.checks.filter((c) => c.pass).length}/${r.checks.length} ${r.passed ? 'PASS' : 'FAIL'}`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
  for (const row of [header, ...table]) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '));
  // Whether a step updates the weights depends on the sampled rewards (a group without reward variance is skipped
  // by design), so one run may have none; the suite as a whole must exercise real updates.
  const realUpdates = runs.reduce((n, r) => n + r.realUpdates, 0);
  console.log(
    `real (non-skipped) learner updates in the suite: ${realUpdates} ` +
      `(${runs.map((r) => `${r.run} ${r.realUpdates}/${STEPS}`).join(', ')})`,
  );
  const failed = runs.flatMap((r) => r.checks.filter((c) => !c.pass).map((c) => `${r.run}: ${c.name}: ${c.detail}`));
  if (realUpdates === 0) failed.push('suite: the learner made no real (non-skipped) update in any run');
  const file = path.join(outDir, 'summary.json');
  const summary = {
    seed,
    config: opts.config,
    stamp,
    totalS: secs(now() - suiteStarted),
    passed: failed.length === 0,
    runs,
  };
  fs.writeFileSync(file, `${JSON.stringify(summary, null, 2)}\n`);
  console.log(`summary: ${file}`);
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

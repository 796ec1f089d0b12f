/**
 * The checks a finished campaign run must pass in the on-demand suites (scripts/crash-test.ts,
 * scripts/fault-test.ts): completion, one campaign_steps row per step, the learner's checkpoint lineage and ledger
 * (one update per step, each on its predecessor, on exactly the recorded episodes), the per-step training episode
 * keys equal to the uninterrupted baseline's, and no episode counted twice.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { databaseUrl, type Environment } from '../config/environment.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { StepRecord } from '../activities/campaign-activities.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { withClient } from '../infra/control-database.ts';
import type { CampaignStatus } from '../workflows/campaign-workflow.ts';

export interface Check {
  name: string;
  pass: boolean;
  detail: string;
}

export const check = (name: string, pass: boolean, detail: string): Check => ({ name, pass, detail });

/** What the checks need to know about the suite: where the learner and the control database are, the sizes. */
export interface CheckContext {
  env: Environment;
  readonly controlUrl: string;
  steps: number;
  perStep: number;
}

export function checkContext(env: Environment, config: CampaignConfig): CheckContext {
  return {
    env,
    // Read when a check runs: a suite on a fresh state folder opens before `tbt up` writes the password file.
    get controlUrl() {
      return databaseUrl(env);
    },
    steps: config.training.steps,
    perStep: config.training.groups_per_step * config.training.group_size,
  };
}

/** How a run's workflow chain ended, as the waiting loop saw it. */
export interface RunEnd {
  status: string;
  result?: CampaignStatus;
  /** Workers found dead (and restarted) while the run was waited on, each as `<kind>@<seconds>s`. */
  workerRestarts: string[];
}

/** Facts about a finished campaign, from the control database. */
export interface Facts {
  steps: Map<number, StepRecord>;
  stepRows: number[];
  /** campaign-independent training keys per step: `step-<n>/<uid>#<rep>` */
  keys: Map<number, string[]>;
}

export async function campaignFacts(ctx: CheckContext, id: string): Promise<Facts> {
  const { rows } = await withClient(ctx.controlUrl, (c) =>
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

const sha256 = (data: string | Buffer) => crypto.createHash('sha256').update(data).digest('hex');

type LearnerFiles = ReturnType<typeof learnerFiles>;

function completionChecks(ctx: CheckContext, end: RunEnd): Check[] {
  return [
    check(
      'campaign completed',
      end.status === 'COMPLETED' && end.result?.stage === 'done' && end.result.step === ctx.steps,
      `workflow ${end.status}, stage ${end.result?.stage ?? '-'}, step ${end.result?.step ?? '-'}/${ctx.steps}`,
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
        `ledger steps 1..${expected.length}, batch hashes match campaign_steps, ${realUpdates} real (non-skipped) ` +
          'update(s)',
    ),
    realUpdates,
  };
}

/** Steps trained again from the previous checkpoint after an interruption before the commit (not applied twice). */
function retrainedSteps(files: LearnerFiles): number {
  const learnerLog = fs.existsSync(files.log) ? fs.readFileSync(files.log, 'utf8') : '';
  const trainedLines = [...learnerLog.matchAll(/step (\d+) done:/g)].map((m) => Number(m[1]));
  return trainedLines.length - new Set(trainedLines).size;
}

/**
 * An episode id's attempt: a training step that lost every group to infrastructure errors runs again with fresh
 * ids (`<uid>#<rep>~retry-<n>`, training-step-workflow.ts); attempt 0 has no suffix.
 */
const attemptOf = (episodeId: string) => Number(/~retry-(\d+)$/.exec(episodeId)?.[1] ?? 0);
/** The task slot an episode id fills (`step-<n>/<uid>#<rep>`), whichever attempt of its step it belongs to. */
const slotOf = (key: string) => key.replace(/~retry-\d+$/, '');

/**
 * Training rows no step records that are still no double count: an attempt that ended in an infrastructure
 * error (never graded, never trained on), or a row of an earlier attempt of a step that was run again with fresh
 * ids (its group was lost, so none of its episodes was trained on).
 */
function allowedExtra(row: { id: string; status: string; step: number | null }, f: Facts): string | undefined {
  if (row.status === 'infrastructure_error') return 'infrastructure-error attempt';
  const recorded = row.step === null ? undefined : f.steps.get(row.step);
  const stepAttempt = recorded ? Math.max(...recorded.groups.flatMap((g) => g.episodeIds).map(attemptOf)) : 0;
  return attemptOf(row.id) < stepAttempt ? 'from a lost attempt of its step' : undefined;
}

/** Episodes: per-step keys, uniqueness, every recorded one stored once and graded, nothing extra counted. */
async function episodeChecks(ctx: CheckContext, id: string, f: Facts): Promise<Check[]> {
  const all = [...f.steps.values()].flatMap((r) => r.groups.flatMap((g) => g.episodeIds));
  const dupes = all.filter((e, i) => all.indexOf(e) !== i);
  const sizes = [...f.steps.values()].map((r) => r.groups.reduce((a, g) => a + g.episodeIds.length, 0));
  const batches = check(
    'no episode id in two groups/steps; full batches',
    dupes.length === 0 && sizes.every((s) => s === ctx.perStep),
    dupes.length
      ? `duplicates: ${dupes.join(', ')}`
      : `${all.length} distinct training episodes, per step [${sizes.join(', ')}] (expected ${ctx.perStep})`,
  );
  const { rows } = await withClient(ctx.controlUrl, (c) =>
    c.query<{ id: string; status: string; step: number | null }>(
      `SELECT id, status, step FROM episodes WHERE campaign = $1 AND purpose = 'train'`,
      [id],
    ),
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  const missing = all.filter((e) => !byId.has(e));
  const badStatus = all.filter((e) => byId.has(e) && !['success', 'agent_failure'].includes(byId.get(e)!.status));
  const recordedSet = new Set(all);
  const unrecorded = rows.filter((r) => !recordedSet.has(r.id));
  const extra = unrecorded.filter((r) => allowedExtra(r, f) === undefined);
  const allowed = new Map<string, number>();
  for (const r of unrecorded) {
    const why = allowedExtra(r, f);
    if (why) allowed.set(why, (allowed.get(why) ?? 0) + 1);
  }
  const leaked = [...f.steps.values()].reduce((a, r) => a + r.leakedInfraEpisodes, 0);
  const notCounted = [...allowed].map(([why, n]) => `${n} ${why}`).join(', ');
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
      .join('; ') ||
      `${all.length} recorded episodes, each one graded row, 0 leaked` +
        (notCounted ? `; ${rows.length - all.length} other rows, none trained on: ${notCounted}` : ''),
  );
  return [batches, stored];
}

/** Per step, the task slots trained on equal the baseline's (a slot retried under a fresh id is the same slot). */
function baselineKeysCheck(f: Facts, baseline: Facts, expected: number[]): Check {
  const diffs: string[] = [];
  const slots = (keys: string[] | undefined) => (keys ?? []).map(slotOf).sort();
  for (const n of expected) {
    const a = slots(baseline.keys.get(n));
    const b = slots(f.keys.get(n));
    if (JSON.stringify(a) !== JSON.stringify(b)) diffs.push(`step ${n}: baseline [${a.join(' ')}] vs [${b.join(' ')}]`);
  }
  const retried = expected.flatMap((n) => (f.keys.get(n) ?? []).filter((k) => attemptOf(k) > 0));
  return check(
    'training episode keys per step = baseline',
    diffs.length === 0,
    diffs.join('; ') ||
      `${expected.map((n) => `step ${n}: ${(f.keys.get(n) ?? []).join(' ')}`).join(' | ')}` +
        (retried.length ? ` (${retried.length} from a step run again after losing its groups)` : ''),
  );
}

export interface RunChecks {
  list: Check[];
  f: Facts;
  realUpdates: number;
  retrained: number;
}

/** Every check of one run; the baseline keys check only when a baseline is given. */
export async function runChecks(ctx: CheckContext, id: string, end: RunEnd, baseline?: Facts): Promise<RunChecks> {
  const list: Check[] = completionChecks(ctx, end);
  const f = await campaignFacts(ctx, id);
  const expected = Array.from({ length: ctx.steps }, (_, i) => i + 1);
  list.push(
    check(
      'campaign_steps: exactly steps 1..N, one row each',
      JSON.stringify(f.stepRows) === JSON.stringify(expected),
      `rows for steps [${f.stepRows.join(', ')}]`,
    ),
  );
  const files = learnerFiles(ctx.env.TBT_STATE_DIR, id);
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
  list.push(...(await episodeChecks(ctx, id, f)));
  if (baseline) list.push(baselineKeysCheck(f, baseline, expected));
  return { list, f, realUpdates: ledger.realUpdates, retrained: retrainedSteps(files) };
}

/**
 * A run's learner checkpoints are about 8.5 GB (4 x 1.6 GB of weights + AdamW state, 4 x 0.5 GB of exports): once
 * checked, keep only the small lineage files (manifest.json, trainer_state.json) and the logs, or a few runs fill
 * the disk (seen: a full disk made the learner's checkpoint write fail).
 */
export function pruneCheckpoints(env: Environment, id: string): void {
  const { checkpoints } = learnerFiles(env.TBT_STATE_DIR, id);
  if (!fs.existsSync(checkpoints)) return;
  fs.rmSync(path.join(checkpoints, 'exports'), { recursive: true, force: true });
  for (const entry of fs.readdirSync(checkpoints, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && (entry.name.endsWith('.distcp') || /^rng-rank\d+\.pt$/.test(entry.name)))
      fs.rmSync(path.join(entry.parentPath, entry.name), { force: true });
  }
}

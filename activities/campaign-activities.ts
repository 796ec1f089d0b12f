import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { currentActivity, heartbeating } from './activity-heartbeat.ts';
import { BadInputError } from '../core/errors.ts';
import { withFailureMapping } from './temporal-failure.ts';
import { repoRoot } from '../config/environment.ts';
import { priceTableSchema } from '../config/price-table.ts';
import { formatProblem, parseYamlFile, readYamlValue } from '../config/yaml-file.ts';
import { campaignCost } from '../core/metrics.ts';
import { withClient } from '../infra/control-database.ts';
import { resultLine } from '../rollout/episode-result-line.ts';
import type { EpisodeRecord } from '../rollout/episode-runner.ts';
import { loadSuites } from '../task-suites/task-suite-loader.ts';
import { campaignFileName } from '../core/campaign-id.ts';

/**
 * Bookkeeping activities of a campaign (orchestrator queue): ingest candidates, select the pool from
 * probe episodes, record steps, aggregate evaluations and write the report. Selection, aggregation and
 * reporting run the same `tbt prepare` / `tbt eval aggregate` / `tbt report` commands users run.
 */

export interface StepRecord {
  campaignId: string;
  step: number;
  groups: { uid: string; rewards: number[]; episodeIds: string[] }[];
  informativeGroups: number;
  zeroVarianceGroups: number;
  replacements: number;
  lostGroups: number;
  infraErrors: number;
  leakedInfraEpisodes: number;
  fallback: 'train_on_fewer' | 'keep_zero_variance' | null;
  meanReward: number;
  update: Record<string, unknown>;
  repeatedUpdate: boolean;
  checkpoint: string;
  exportPath: string;
  /** Version every policy server holds after this step (its export). */
  weightVersion: number;
  /** Version the step's episodes were sampled from. */
  sampledWeightVersion: number;
  /** Episodes dropped (and refilled) for lagging more than max_staleness versions. */
  staleEpisodes: number;
  /** Seconds each server's weight sync took. */
  syncSeconds: number[];
}

const run = promisify(execFile);

async function tbt(args: string[]): Promise<string> {
  try {
    // A cancelled (or timed-out) activity ends its subprocess, so a retry never runs beside an orphan.
    const signal = currentActivity()?.cancellationSignal;
    const { stdout } = await run(
      path.join(repoRoot, 'node_modules', '.bin', 'tsx'),
      [path.join(repoRoot, 'cli', 'tbt.ts'), ...args],
      { maxBuffer: 64 << 20, timeout: 30 * 60_000, signal },
    );
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; code?: number };
    // Exit 1 = the input is wrong (names file/line/field); retrying cannot help.
    if (e.code === 1 || e.code === 2)
      throw new BadInputError(`tbt ${args[0]} failed: ${(e.stderr ?? '').trim().slice(0, 2000)}`);
    throw err;
  }
}

/**
 * Every bookkeeping activity heartbeats every 10 s while it runs, so a killed orchestrator worker is noticed
 * at the heartbeat timeout (1 minute, workflows/activity-options.ts) rather than at the end of its long
 * start-to-close limit. Called outside an activity (tests, tools), the functions just run.
 */
function withHeartbeats<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  // Errors become Temporal failures by our one mapping (activities/temporal-failure.ts).
  return withFailureMapping(
    Object.fromEntries(
      Object.entries(activities).map(([name, fn]) => [
        name,
        (...args: never[]) => (currentActivity() ? heartbeating(() => fn(...args)) : fn(...args)),
      ]),
    ) as T,
  );
}

interface ResultRow {
  id: string;
  task_uid: string;
  repetition: number;
  domain: string;
  status: EpisodeRecord['outcome'];
  finish_reason: EpisodeRecord['finishReason'] | null;
  cause: string | null;
  usage: EpisodeRecord['usage'];
}

export function createCampaignActivities(deps: { controlUrl: string; stateDir: string }) {
  const runDir = (campaignId: string) => {
    const dir = path.join(deps.stateDir, 'campaigns', campaignFileName(campaignId));
    fs.mkdirSync(dir, { recursive: true });
    return dir;
  };

  /**
   * Result lines of a stage's episodes, selecting only the columns a result line needs (never trajectories or
   * token arrays): by id list (stages recorded before sharding) or by id prefix, one line per `uid#rep` key, its
   * final attempt (the one that is not an infrastructure error, else the latest).
   */
  async function writeResultLines(
    select: { episodeIds: string[] } | { campaignId: string; purpose: string; idPrefix: string },
    file: string,
  ): Promise<number> {
    const columns = `id, task_uid, repetition, domain, status, finish_reason, cause, record->'usage' AS usage`;
    const rows = await withClient(deps.controlUrl, (c) =>
      c.query<ResultRow>(
        'episodeIds' in select
          ? `SELECT ${columns} FROM episodes WHERE id = ANY($1) AND status <> 'running' ORDER BY array_position($1, id)`
          : `SELECT DISTINCT ON (task_uid, repetition) ${columns} FROM episodes
             WHERE campaign = $1 AND purpose = $2 AND starts_with(id, $3) AND status <> 'running' AND record IS NOT NULL
             ORDER BY task_uid, repetition, (status = 'infrastructure_error'), finished_at DESC`,
        'episodeIds' in select ? [select.episodeIds] : [select.campaignId, select.purpose, `${select.idPrefix}/`],
      ),
    );
    const lines = rows.rows.map((r) =>
      JSON.stringify(
        resultLine(r.id, r.task_uid, r.repetition, r.domain, {
          outcome: r.status,
          finishReason: r.finish_reason ?? 'infrastructure_error',
          cause: r.cause ?? undefined,
          usage: r.usage,
        }),
      ),
    );
    fs.writeFileSync(file, lines.length ? `${lines.join('\n')}\n` : '');
    return lines.length;
  }

  return withHeartbeats({
    /**
     * Training candidates (never an excluded or evaluation-only uid), every suite task (`evaluation.tasks: all`)
     * and the held-out ones, those kept out of training (`evaluation.tasks: held_out`).
     */
    async ingestCandidates(input: {
      campaignId: string;
      suiteDir: string;
      excludeUidsFile?: string;
      maxCandidates?: number;
      /** With held_out, an empty held-out set or an excluded uid the suite lacks is an error, not a silent skip. */
      evaluationTasks?: 'pool' | 'all' | 'held_out';
    }): Promise<{ uids: string[]; excluded: number; evaluationUids: string[]; heldOutUids: string[] }> {
      const { suites, problems } = loadSuites(input.suiteDir);
      if (problems.length || !suites[0])
        throw new BadInputError(
          `suite ${input.suiteDir} has problems: ${problems
            .slice(0, 5)
            .map((p) => `${p.file}:${p.line}: ${p.field} ${p.message}`)
            .join('; ')}`,
        );
      let excluded = new Set<string>();
      if (input.excludeUidsFile) {
        const list = readYamlValue(input.excludeUidsFile);
        if (!Array.isArray(list)) throw new BadInputError(`${input.excludeUidsFile}: expected a YAML list of uids`);
        excluded = new Set(list.map(String));
      }
      // Imported tasks marked evaluation-only (an evaluation-only benchmark) never enter a training pool either.
      for (const t of suites[0].tasks) if ('evaluation_only' in t && t.evaluation_only) excluded.add(t.uid);
      const all = suites[0].tasks.map((t) => t.uid).sort();
      const heldOutUids = all.filter((u) => excluded.has(u));
      if (input.evaluationTasks === 'held_out') {
        const unknown = [...excluded].filter((u) => !all.includes(u)).sort();
        if (unknown.length)
          throw new BadInputError(
            `${input.excludeUidsFile}: ${unknown.length} held-out uid(s) not in suite ${input.suiteDir} ` +
              `(evaluation.tasks: held_out evaluates them): ${unknown.slice(0, 5).join(', ')}`,
          );
        if (!heldOutUids.length)
          throw new BadInputError(
            `evaluation.tasks is held_out but suite ${input.suiteDir} holds no task out of training: ` +
              'set exclude_uids to a YAML list of the uids to evaluate on',
          );
      }
      const uids = all.filter((u) => !excluded.has(u)).slice(0, input.maxCandidates ?? Infinity);
      fs.writeFileSync(
        path.join(runDir(input.campaignId), 'candidates.yaml'),
        uids.map((u) => `- ${JSON.stringify(u)}`).join('\n') + '\n',
      );
      return { uids, excluded: heldOutUids.length, evaluationUids: all, heldOutUids };
    },

    /** Difficulty selection over this campaign's probe episodes, by `tbt prepare` (reference semantics). */
    async selectPool(input: {
      campaignId: string;
      /** The probe's episode id prefix (sharded probes); `probeEpisodeIds` for probes recorded before. */
      idPrefix?: string;
      probeEpisodeIds?: string[];
      minCleanRuns: number;
      retainBands: string[];
    }): Promise<{ pool: string[]; bands: Record<string, number>; aggregates: string }> {
      const dir = runDir(input.campaignId);
      const results = path.join(dir, 'probe-results.jsonl');
      await writeResultLines(
        input.idPrefix !== undefined
          ? { campaignId: input.campaignId, purpose: 'probe', idPrefix: input.idPrefix }
          : { episodeIds: input.probeEpisodeIds ?? [] },
        results,
      );
      const out = path.join(dir, 'prepare');
      await tbt([
        'prepare',
        '--policy',
        results,
        '--output-dir',
        out,
        '--uid-field',
        'uid',
        '--success-field',
        'success',
        '--system-error-field',
        'infrastructure_error',
        '--min-clean-runs',
        String(input.minCleanRuns),
        ...input.retainBands.flatMap((b) => ['--retain-band', b]),
      ]);
      const pool = (readYamlValue(path.join(out, 'selected.yaml')) as string[]) ?? [];
      const bands: Record<string, number> = {};
      for (const line of fs.readFileSync(path.join(out, 'aggregates.jsonl'), 'utf8').split('\n').filter(Boolean)) {
        const d = (JSON.parse(line) as { difficulty: string }).difficulty;
        bands[d] = (bands[d] ?? 0) + 1;
      }
      return { pool, bands, aggregates: path.join(out, 'aggregates.jsonl') };
    },

    async recordStep(record: StepRecord): Promise<void> {
      await withClient(deps.controlUrl, (c) =>
        c.query(
          `INSERT INTO campaign_steps (campaign, step, record) VALUES ($1, $2, $3) ON CONFLICT (campaign, step) DO ` +
            `UPDATE SET record = EXCLUDED.record`,
          [record.campaignId, record.step, JSON.stringify(record)],
        ),
      );
      const steps = path.join(runDir(record.campaignId), 'steps.jsonl');
      const rows = await withClient(deps.controlUrl, (c) =>
        c.query<{ record: StepRecord }>(`SELECT record FROM campaign_steps WHERE campaign = $1 ORDER BY step`, [
          record.campaignId,
        ]),
      );
      fs.writeFileSync(
        steps,
        rows.rows
          .map(({ record: r }) =>
            JSON.stringify({
              step: r.step,
              mean_reward: r.meanReward,
              // Of the groups drawn (replacements included), not of those trained: train_on_fewer trains only
              // informative ones, which read as 100% however many were replaced.
              informative_group_fraction: r.informativeGroups
                ? r.informativeGroups / (r.informativeGroups + r.zeroVarianceGroups)
                : 0,
              loss: Number(r.update.loss ?? 0),
              grad_norm: Number(r.update.grad_norm ?? 0),
              groups: r.groups.length,
              infra_errors_refilled: r.infraErrors,
              zero_variance_replaced: r.replacements,
              wall_s: Number(r.update.time_s ?? 0),
              weight_version: r.weightVersion ?? null,
              sampled_weight_version: r.sampledWeightVersion ?? null,
              stale_episodes_dropped: r.staleEpisodes ?? 0,
              weight_sync_s: r.syncSeconds ?? [],
            }),
          )
          .join('\n') + '\n',
      );
    },

    /** Coverage-gated aggregation of an evaluation, by `tbt eval aggregate`. */
    async aggregateEvaluation(input: {
      campaignId: string;
      label: string;
      /** The evaluation's episode id prefix (sharded evaluations); `episodeIds` for ones recorded before. */
      idPrefix?: string;
      episodeIds?: string[];
      uids: string[];
      repeats: number;
      prices?: string;
    }): Promise<{ aggregate: string; summary: string }> {
      const dir = runDir(input.campaignId);
      const results = path.join(dir, `eval-${input.label}.jsonl`);
      await writeResultLines(
        input.idPrefix !== undefined
          ? { campaignId: input.campaignId, purpose: 'eval', idPrefix: input.idPrefix }
          : { episodeIds: input.episodeIds ?? [] },
        results,
      );
      const tasks = path.join(dir, `eval-${input.label}-tasks.yaml`);
      fs.writeFileSync(tasks, input.uids.map((u) => `- ${JSON.stringify(u)}`).join('\n') + '\n');
      const aggregate = path.join(dir, `eval-${input.label}.json`);
      const summary = await tbt([
        'eval',
        'aggregate',
        '--results',
        results,
        '--repeats',
        String(input.repeats),
        '--tasks',
        tasks,
        '--out',
        aggregate,
        ...(input.prices ? ['--prices', input.prices] : []),
      ]);
      return { aggregate, summary: summary.slice(0, 4000) };
    },

    /**
     * What the reference leaves out: probing cost (probe episode tokens x prices) and training cost (training
     * episode tokens x prices + learner process-seconds x the hourly price). Evaluation cost comes from the
     * evaluation aggregates.
     */
    async campaignCosts(input: {
      campaignId: string;
      prices: string;
      hourlyPriceUsd: number;
      learnerProcesses: number;
    }): Promise<string> {
      const parsedPrices = parseYamlFile(input.prices, priceTableSchema);
      if (!parsedPrices.value) throw new BadInputError(parsedPrices.problems.map(formatProblem).join('\n'));
      const prices = parsedPrices.value;
      const rows = await withClient(deps.controlUrl, (c) =>
        c.query<{
          purpose: string;
          id: string;
          task_uid: string;
          repetition: number;
          domain: string;
          record: Pick<EpisodeRecord, 'outcome' | 'finishReason' | 'usage'>;
        }>(
          // Only what the cost needs: never trajectories or token arrays.
          `SELECT purpose, id, task_uid, repetition, domain, jsonb_build_object('outcome', status, 'finishReason',
             finish_reason, 'usage', record->'usage') AS record
           FROM episodes WHERE campaign = $1 AND record IS NOT NULL`,
          [input.campaignId],
        ),
      );
      const tokenCost = (purpose: string) =>
        campaignCost(
          rows.rows
            .filter((r) => r.purpose === purpose)
            .map((r) => resultLine(r.id, r.task_uid, r.repetition, r.domain, r.record).tokens),
          prices,
        ).total;
      const steps = await withClient(deps.controlUrl, (c) =>
        c.query<{ record: StepRecord }>(`SELECT record FROM campaign_steps WHERE campaign = $1`, [input.campaignId]),
      );
      const learnerSeconds = steps.rows.reduce((a, r) => a + Number(r.record.update.time_s ?? 0), 0);
      const costs = {
        probing: tokenCost('probe'),
        training: tokenCost('train') + (learnerSeconds * input.learnerProcesses * input.hourlyPriceUsd) / 3600,
      };
      const file = path.join(runDir(input.campaignId), 'costs.json');
      fs.writeFileSync(file, `${JSON.stringify(costs, null, 2)}\n`);
      return file;
    },

    async writeReport(input: {
      campaignId: string;
      title: string;
      before?: string;
      after?: string;
      probe?: string;
      costs?: string;
    }): Promise<{ html: string; markdown: string }> {
      const dir = runDir(input.campaignId);
      const out = path.join(dir, 'report');
      const steps = path.join(dir, 'steps.jsonl');
      await tbt([
        'report',
        '--out',
        out,
        '--title',
        input.title,
        '--campaign',
        input.campaignId,
        ...(input.probe ? ['--probe', input.probe] : []),
        ...(fs.existsSync(steps) ? ['--steps', steps] : []),
        ...(input.costs ? ['--costs', input.costs] : []),
        ...(input.before && input.after
          ? ['--before', input.before, '--after', input.after]
          : input.after
            ? ['--eval', input.after]
            : []),
      ]);
      return { html: path.join(out, 'index.html'), markdown: path.join(out, 'summary.md') };
    },

    /** The newest exported checkpoint of a campaign and its task pool (for scheduled re-evaluation). */
    async latestCheckpoint(input: {
      campaignId: string;
      needPool: boolean;
    }): Promise<{ step: number; exportPath: string | null; pool: string[] }> {
      const rows = await withClient(deps.controlUrl, (c) =>
        c.query<{ step: number; record: StepRecord }>(
          `SELECT step, record FROM campaign_steps WHERE campaign = $1 ORDER BY step DESC LIMIT 1`,
          [input.campaignId],
        ),
      );
      const selected = path.join(runDir(input.campaignId), 'prepare', 'selected.yaml');
      const latest = rows.rows[0];
      if (!input.needPool) return { step: latest?.step ?? 0, exportPath: latest?.record.exportPath ?? null, pool: [] };
      if (!fs.existsSync(selected))
        throw new BadInputError(
          `campaign ${input.campaignId} has no selected pool (${selected} missing): was it probed?`,
        );
      const pool = (readYamlValue(selected) as string[]) ?? [];
      return { step: latest?.step ?? 0, exportPath: latest?.record.exportPath ?? null, pool };
    },

    async writeManifest(input: { campaignId: string; manifest: Record<string, unknown> }): Promise<string> {
      const file = path.join(runDir(input.campaignId), 'manifest.json');
      fs.writeFileSync(file, `${JSON.stringify(input.manifest, null, 2)}\n`);
      return file;
    },
  });
}

export type CampaignActivities = ReturnType<typeof createCampaignActivities>;

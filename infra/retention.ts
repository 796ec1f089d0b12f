import fs from 'node:fs';
import path from 'node:path';
import { withClient } from './control-database.ts';

/**
 * What a deployment may forget. In the state folder, with defaults that lose nothing a resume needs: per campaign
 * learner folder (`learners/<campaign>/`), weight exports beyond the last `keepExports`, and batch files of steps
 * that a committed checkpoint already contains (a retried step rewrites its batch). Checkpoints themselves
 * are pruned by the learner (`learner.keep_checkpoints`), unless the policy sets `keepCheckpoints` for a
 * finished run. Logs over `maxLogBytes` are rotated (copy, then truncate in place, so a daemon appending to it
 * keeps writing), one previous generation kept as `.1`. In the control database: episode records only when
 * asked (`pruneEpisodeRecords`); unused template databases are the sandbox pool's to drop (`pruneTemplates`).
 */

export interface RetentionPolicy {
  keepExports: number;
  maxLogBytes: number;
  /**
   * Committed step checkpoints to keep. Unset: the learner's to prune (`learner.keep_checkpoints`); set it only
   * for a finished campaign, whose learner no longer runs and will not resume from them.
   */
  keepCheckpoints?: number;
}

export const defaultRetention: RetentionPolicy = { keepExports: 2, maxLogBytes: 64 * 1024 * 1024 };

/** `tbt gc` drops an unused template database once it is this old (an older one of the same scenario at once). */
export const defaultTemplateMaxAgeDays = 30;

export interface GcReport {
  removed: string[];
  rotated: string[];
  freedBytes: number;
}

function stepOf(name: string, suffix = ''): number | undefined {
  const m = new RegExp(`^step-(\\d+)${suffix.replace('.', '\\.')}$`).exec(name);
  return m ? Number(m[1]) : undefined;
}

function list(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

export function diskUsage(target: string): number {
  let stat: fs.Stats;
  try {
    stat = fs.lstatSync(target);
  } catch {
    return 0;
  }
  if (!stat.isDirectory()) return stat.size;
  return list(target).reduce((sum, name) => sum + diskUsage(path.join(target, name)), 0);
}

function remove(target: string, report: GcReport, dryRun: boolean): void {
  report.freedBytes += diskUsage(target);
  report.removed.push(target);
  if (!dryRun) fs.rmSync(target, { recursive: true, force: true });
}

/** Retention for one campaign's learner folder (`dir` holds `checkpoints/` and `batches/`). */
export function pruneLearnerFolder(dir: string, policy: RetentionPolicy, dryRun = false, report?: GcReport): GcReport {
  const out = report ?? { removed: [], rotated: [], freedBytes: 0 };
  const checkpoints = path.join(dir, 'checkpoints');
  const committed = list(checkpoints)
    .map((n) => stepOf(n))
    .filter((s): s is number => s !== undefined)
    .sort((a, b) => a - b);
  const lastCommitted = committed.length ? Math.max(...committed) : undefined;
  const batches = path.join(dir, 'batches');
  for (const name of list(batches)) {
    const step = stepOf(name, '.jsonl');
    if (step !== undefined && lastCommitted !== undefined && step <= lastCommitted)
      remove(path.join(batches, name), out, dryRun);
  }
  const exports = path.join(checkpoints, 'exports');
  const exported = list(exports)
    .map((n) => stepOf(n))
    .filter((s): s is number => s !== undefined)
    .sort((a, b) => a - b);
  for (const step of exported.slice(0, Math.max(0, exported.length - policy.keepExports)))
    remove(path.join(exports, `step-${step}`), out, dryRun);
  if (policy.keepCheckpoints !== undefined)
    for (const step of committed.slice(0, Math.max(0, committed.length - policy.keepCheckpoints)))
      remove(path.join(checkpoints, `step-${step}`), out, dryRun);
  return out;
}

export function rotateLogs(dir: string, policy: RetentionPolicy, dryRun: boolean, report: GcReport): void {
  for (const name of list(dir)) {
    const file = path.join(dir, name);
    let stat: fs.Stats;
    try {
      stat = fs.lstatSync(file);
    } catch {
      continue; // removed meanwhile
    }
    // A database server's data folder and checkpoints hold no logs of ours and are large.
    if (stat.isDirectory() && (name === 'data' || name === 'checkpoints')) continue;
    if (stat.isDirectory()) rotateLogs(file, policy, dryRun, report);
    else if (stat.isFile() && name.endsWith('.log') && stat.size > policy.maxLogBytes) {
      report.rotated.push(file);
      report.freedBytes += Math.max(0, diskUsage(`${file}.1`));
      if (dryRun) continue;
      fs.copyFileSync(file, `${file}.1`);
      fs.truncateSync(file, 0);
    }
  }
}

/** Retention over a whole state folder: every campaign's learner folder, then every log file. */
export function collectGarbage(stateDir: string, policy: RetentionPolicy, dryRun = false): GcReport {
  const report: GcReport = { removed: [], rotated: [], freedBytes: 0 };
  const learners = path.join(stateDir, 'learners');
  for (const name of list(learners)) pruneLearnerFolder(path.join(learners, name), policy, dryRun, report);
  rotateLogs(stateDir, policy, dryRun, report);
  return report;
}

export interface RecordPruneReport {
  episodes: number;
  campaignSteps: number;
  /** Stored campaign files (selected pool, aggregates, costs, manifest: campaign-records/campaign-files.ts). */
  campaignFiles: number;
  /** Campaigns whose every record went. */
  campaigns: string[];
}

/**
 * Episode records are the deployment's record of what ran, so they are pruned only when the operator asks
 * (`tbt gc --episodes-older-than DAYS`), never by default. A campaign goes whole (episodes, step rows and files
 * together) once nothing of it (no episode started or finished, no step or file recorded) is newer than the bound:
 * a report or a resume never sees half a campaign. An episode of no campaign goes once it finished (or, never
 * finished, started) before the bound. One transaction; with `dryRun`, counts only.
 */
export async function pruneEpisodeRecords(
  controlUrl: string,
  options: { olderThanDays: number; dryRun?: boolean },
): Promise<RecordPruneReport> {
  return withClient(controlUrl, async (c) => {
    await c.query('BEGIN');
    try {
      const cutoff = [options.olderThanDays];
      const idle = await c.query<{ campaign: string }>(
        `SELECT campaign FROM (
           SELECT campaign, coalesce(finished_at, started_at) AS at FROM episodes WHERE campaign IS NOT NULL
           UNION ALL SELECT campaign, recorded_at FROM campaign_steps
           UNION ALL SELECT campaign, written_at FROM campaign_files) activity
         GROUP BY campaign HAVING max(at) < now() - make_interval(days => $1) ORDER BY campaign`,
        cutoff,
      );
      const campaigns = idle.rows.map((r) => r.campaign);
      const episodes = `FROM episodes WHERE campaign = ANY($2) OR (campaign IS NULL
        AND coalesce(finished_at, started_at) < now() - make_interval(days => $1))`;
      const steps = 'FROM campaign_steps WHERE campaign = ANY($1)';
      const count = async (from: string, values: unknown[]) => {
        const sql = options.dryRun
          ? `SELECT count(*)::int AS n ${from}`
          : `WITH gone AS (DELETE ${from} RETURNING 1) SELECT count(*)::int AS n FROM gone`;
        return (await c.query<{ n: number }>(sql, values)).rows[0]!.n;
      };
      const report = {
        episodes: await count(episodes, [...cutoff, campaigns]),
        campaignSteps: await count(steps, [campaigns]),
        campaignFiles: await count('FROM campaign_files WHERE campaign = ANY($1)', [campaigns]),
        campaigns,
      };
      // Saved turns of pruned episodes (an episode stored as an infrastructure error keeps its turns).
      if (!options.dryRun)
        await c.query(
          'DELETE FROM episode_turns t WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = t.episode_id)',
        );
      await c.query('COMMIT');
      return report;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  });
}

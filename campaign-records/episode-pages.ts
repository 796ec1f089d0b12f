import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { BadInputError } from '../core/errors.ts';
import { renderEpisodePage } from '../core/report/episode-page.ts';
import { chooseEpisodes, type EpisodeResultRef } from '../core/report/episode-selection.ts';
import { episodePageName, episodeView, type StoredEpisode } from '../core/report/episode-view.ts';
import type { EvalEpisodes } from '../core/report/report-model.ts';
import { withClient } from '../infra/control-database.ts';

/**
 * Episodes read back from the control database for reading (docs/episode-viewer.md): one row as the viewer's
 * input (`tbt episodes show`), and the pages a report links to, `episodes/<page name>.html` next to its
 * index.html, for the episodes `chooseEpisodes` picks out of an evaluation's result lines.
 */

interface EpisodeRow {
  id: string;
  task_uid: string;
  suite: string;
  scenario: string;
  domain: string;
  purpose: string;
  campaign: string | null;
  step: number | null;
  repetition: number;
  status: string;
  policy_model: string | null;
  started_at: Date | null;
  finished_at: Date | null;
  record: StoredEpisode['record'];
}

function storedEpisode(r: EpisodeRow): StoredEpisode {
  return {
    id: r.id,
    taskUid: r.task_uid,
    suite: r.suite,
    scenario: r.scenario,
    domain: r.domain,
    purpose: r.purpose,
    campaign: r.campaign,
    step: r.step,
    repetition: r.repetition,
    status: r.status,
    policyModel: r.policy_model,
    startedAt: r.started_at?.toISOString() ?? null,
    finishedAt: r.finished_at?.toISOString() ?? null,
    record: r.record,
  };
}

/** The stored episodes with these ids (those that exist), by id; without token ids (the viewer shows text). */
export async function readStoredEpisodes(controlUrl: string, ids: string[]): Promise<Map<string, StoredEpisode>> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<EpisodeRow>(
      `SELECT id, task_uid, suite, scenario, domain, purpose, campaign, step, repetition, status, policy_model,
              started_at, finished_at, record - 'trajectory' AS record
       FROM episodes WHERE id = ANY($1)`,
      [ids],
    ),
  );
  return new Map(rows.map((r) => [r.id, storedEpisode(r)]));
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The page file name of an episode (its id made safe for a file name, plus a hash of the id). */
export function episodePageFile(id: string): string {
  return episodePageName(id, sha256);
}

/** The result-line files an aggregate was computed from (`inputs.results` of `tbt eval aggregate --out`). */
function resultFiles(aggregateFile: string): string[] {
  const aggregate = JSON.parse(fs.readFileSync(aggregateFile, 'utf8')) as { inputs?: { results?: { path: string }[] } };
  return (aggregate.inputs?.results ?? []).map((r) =>
    path.isAbsolute(r.path) || fs.existsSync(r.path) ? r.path : path.join(path.dirname(aggregateFile), r.path),
  );
}

/** The result lines that name their episode; what could not be read goes to `notes`. */
function resultRefs(aggregateFile: string, notes: string[]): EpisodeResultRef[] {
  const refs: EpisodeResultRef[] = [];
  for (const file of resultFiles(aggregateFile)) {
    if (!fs.existsSync(file)) {
      notes.push(`result lines ${file} not found.`);
      continue;
    }
    let withoutId = 0;
    for (const [i, text] of fs.readFileSync(file, 'utf8').split('\n').entries()) {
      if (!text.trim()) continue;
      let line: Partial<EpisodeResultRef>;
      try {
        line = JSON.parse(text) as Partial<EpisodeResultRef>;
      } catch {
        throw new BadInputError(`${file}:${i + 1}: not JSON`);
      }
      if (typeof line.id !== 'string' || typeof line.uid !== 'string') withoutId += 1;
      else
        refs.push({
          id: line.id,
          uid: line.uid,
          repetition: Number(line.repetition ?? 0),
          domain: String(line.domain ?? ''),
          success: line.success === true,
          infrastructure_error: line.infrastructure_error === true,
          task_error: line.task_error === true,
        });
    }
    if (withoutId) notes.push(`${withoutId} result lines of ${file} name no episode id.`);
  }
  return refs;
}

/**
 * Writes the pages of an evaluation's chosen episodes into `reportDir/episodes/` and returns the report's
 * episode table input: per task, the chosen episodes and the relative link of each page written.
 */
export async function writeEvaluationEpisodePages(
  controlUrl: string,
  reportDir: string,
  aggregateFile: string,
): Promise<EvalEpisodes> {
  const notes: string[] = [];
  const tasks = chooseEpisodes(resultRefs(aggregateFile, notes));
  const ids = tasks.flatMap((t) => t.chosen.map((c) => c.id));
  const stored = ids.length ? await readStoredEpisodes(controlUrl, ids) : new Map<string, StoredEpisode>();
  const dir = path.join(reportDir, 'episodes');
  fs.mkdirSync(dir, { recursive: true });
  const missing = ids.filter((id) => !stored.get(id)?.record);
  if (missing.length)
    notes.push(`${missing.length} chosen episodes have no stored record (e.g. ${missing[0]}), so no page.`);
  return {
    notes,
    tasks: tasks.map((t) => {
      const hrefs: Record<string, string> = {};
      for (const c of t.chosen) {
        const episode = stored.get(c.id);
        if (!episode?.record) continue;
        const file = episodePageFile(c.id);
        const html = renderEpisodePage(episodeView(episode), {
          back: { href: '../index.html#evaluation', label: 'report' },
        });
        fs.writeFileSync(path.join(dir, file), html);
        hrefs[c.id] = `episodes/${file}`;
      }
      return { ...t, hrefs };
    }),
  };
}

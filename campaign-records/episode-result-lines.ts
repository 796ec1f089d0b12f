import fs from 'node:fs';
import { withClient } from '../infra/control-database.ts';
import { resultLine } from '../rollout/episode-result-line.ts';
import type { EpisodeRecord } from '../rollout/episode-runner.ts';

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

/** A stage's episodes: by id list (stages recorded before sharding) or by the stage's episode id prefix. */
export type StageEpisodes = { episodeIds: string[] } | { campaignId: string; purpose: string; idPrefix: string };

/**
 * Result lines of a stage's episodes, selecting only the columns a result line needs (never trajectories or
 * token arrays): by id list or by id prefix, one line per `uid#rep` key, its final attempt (the one that is not
 * an infrastructure error, else the latest). Writes them to `file`; returns how many.
 */
export async function writeResultLines(controlUrl: string, select: StageEpisodes, file: string): Promise<number> {
  const columns = `id, task_uid, repetition, domain, status, finish_reason, cause, record->'usage' AS usage`;
  const rows = await withClient(controlUrl, (c) =>
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

import { withClient } from '../infra/control-database.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';

/**
 * Episodes a learner trained, read back by id for a step's record (workflows/trained-batch-record.ts) when the
 * workflow no longer holds them: a re-run step can draw other episodes than the batch its learner trained.
 */

/** What a step's record needs of a trained episode. */
export interface TrainedEpisode extends Pick<EpisodeSummary, 'id' | 'reward' | 'outcome' | 'weightVersion'> {
  taskUid: string;
}

/** The finished episodes among `ids` (an id without a stored record is left out), in no particular order. */
export async function trainedEpisodes(controlUrl: string, ids: string[]): Promise<TrainedEpisode[]> {
  if (ids.length === 0) return [];
  const rows = await withClient(controlUrl, (c) =>
    c.query<{ id: string; task_uid: string; reward: number | null; outcome: string; weight_version: number | null }>(
      `SELECT id, task_uid, (record->>'reward')::float8 AS reward, record->>'outcome' AS outcome,
              (record->>'weightVersion')::int AS weight_version
         FROM episodes WHERE id = ANY($1) AND record IS NOT NULL`,
      [ids],
    ),
  );
  return rows.rows.map((r) => ({
    id: r.id,
    taskUid: r.task_uid,
    reward: r.reward ?? 0,
    outcome: r.outcome as EpisodeSummary['outcome'],
    ...(r.weight_version === null ? {} : { weightVersion: r.weight_version }),
  }));
}

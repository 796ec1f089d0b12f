import type pg from 'pg';
import { storableValue } from '../core/storable-text.ts';
import type { TurnCheckpoint } from './turn-checkpoints.ts';

/**
 * An episode's completed turns in the control database (`episode_turns`), for a later attempt to resume from
 * (rollout/turn-checkpoints.ts). Only the attempt that owns the episode's `running` row saves; the turns go when the
 * episode is stored (an infrastructure-errored one too: the workflow plays it again under a new id).
 */

/** Saves one turn if `attempt` still owns the running episode; false when it no longer does. */
export async function saveTurnCheckpoint(
  db: pg.ClientBase,
  episodeId: string,
  attempt: string,
  checkpoint: TurnCheckpoint,
): Promise<boolean> {
  const { value } = storableValue(checkpoint);
  const r = await db.query(
    `INSERT INTO episode_turns (episode_id, turn, attempt, checkpoint)
     SELECT $1, $2, $3, $4 FROM episodes WHERE id = $1 AND status = 'running' AND attempt = $3
     ON CONFLICT (episode_id, turn) DO UPDATE SET attempt = EXCLUDED.attempt, checkpoint = EXCLUDED.checkpoint,
                                                 saved_at = now()`,
    [episodeId, checkpoint.turn, attempt, JSON.stringify(value)],
  );
  return r.rowCount === 1;
}

/** The episode's saved turns, in order. */
export async function loadTurnCheckpoints(db: pg.ClientBase, episodeId: string): Promise<TurnCheckpoint[]> {
  const { rows } = await db.query<{ checkpoint: TurnCheckpoint }>(
    'SELECT checkpoint FROM episode_turns WHERE episode_id = $1 ORDER BY turn',
    [episodeId],
  );
  return rows.map((r) => r.checkpoint);
}

/** Forgets the episode's saved turns (it ended, or it starts over from the prompt). */
export async function clearTurnCheckpoints(db: pg.ClientBase, episodeId: string): Promise<void> {
  await db.query('DELETE FROM episode_turns WHERE episode_id = $1', [episodeId]);
}

import type pg from 'pg';
import type { EpisodeRecord } from './episode-runner.ts';

/**
 * Episodes in the control database, keyed by a caller-chosen id derived from workflow ids, so a retried
 * activity finds the finished episode instead of running (and counting) it twice.
 */

export interface EpisodeMeta {
  id: string;
  taskUid: string;
  suite: string;
  scenario: string;
  domain: string;
  purpose: 'probe' | 'train' | 'eval' | 'adhoc';
  campaign?: string;
  step?: number;
  groupIndex?: number;
  repetition?: number;
  policyModel?: string;
}

export interface EpisodeSummary {
  id: string;
  outcome: EpisodeRecord['outcome'];
  reward: number;
  finishReason: string;
  cause?: string;
  policyTokens: number;
  /** host:pid of the worker that ran it */ worker?: string;
}

export function summarize(
  id: string,
  r: Pick<EpisodeRecord, 'outcome' | 'reward' | 'finishReason' | 'cause' | 'usage' | 'worker'>,
): EpisodeSummary {
  return {
    id,
    outcome: r.outcome,
    reward: r.reward,
    finishReason: r.finishReason,
    ...(r.cause ? { cause: r.cause.slice(0, 500) } : {}),
    policyTokens: r.usage.policy.output,
    ...(r.worker ? { worker: r.worker } : {}),
  };
}

/** The finished episode with this id, if any (a `running` row is a crashed attempt and does not count). */
export async function findFinishedEpisode(db: pg.ClientBase, id: string): Promise<EpisodeSummary | undefined> {
  const { rows } = await db.query<{ record: EpisodeRecord }>(
    `SELECT record FROM episodes WHERE id = $1 AND status <> 'running'`,
    [id],
  );
  return rows[0] ? summarize(id, rows[0].record) : undefined;
}

/** Claims the episode for one attempt (a later attempt takes over a crashed one). */
export async function markEpisodeRunning(db: pg.ClientBase, meta: EpisodeMeta, attempt: string): Promise<void> {
  await db.query(
    `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, step, group_index, repetition, status, policy_model, attempt)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'running', $11, $12)
     ON CONFLICT (id) DO UPDATE SET status = 'running', started_at = now(), attempt = EXCLUDED.attempt WHERE episodes.status = 'running'`,
    [
      meta.id,
      meta.taskUid,
      meta.suite,
      meta.scenario,
      meta.domain,
      meta.purpose,
      meta.campaign ?? null,
      meta.step ?? null,
      meta.groupIndex ?? null,
      meta.repetition ?? 0,
      meta.policyModel ?? null,
      attempt,
    ],
  );
}

/**
 * Stores the finished episode if this attempt still owns it. Returns false when another attempt took over
 * or finished first: its record (trajectory and reward together) is the one that counts.
 */
export async function saveEpisode(
  db: pg.ClientBase,
  id: string,
  record: EpisodeRecord,
  attempt: string,
): Promise<boolean> {
  const r = await db.query(
    `UPDATE episodes SET status = $2, reward = $3, finish_reason = $4, cause = $5, record = $6, finished_at = now() WHERE id = $1 AND status = 'running' AND attempt = $7`,
    [
      id,
      record.outcome,
      record.outcome === 'infrastructure_error' ? null : record.reward,
      record.finishReason,
      record.cause ?? null,
      JSON.stringify(record),
      attempt,
    ],
  );
  return r.rowCount === 1;
}

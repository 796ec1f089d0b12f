import type pg from 'pg';
import { storableValue } from '../core/storable-text.ts';
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
  /** Weight version it sampled from (campaign episodes): the oldest its completions were served with. */
  weightVersion?: number;
  /**
   * Trained (mask-1) tokens per sampler version, keyed by version: with `training.partial_rollouts` an episode
   * interrupted by a weight sync carries two. Absent when its trajectory carried no versions.
   */
  versionTokens?: Record<string, number>;
}

/** Trained tokens per sampler version of a trajectory (undefined when it carries no versions). */
export function versionTokens(trajectory: EpisodeRecord['trajectory']): Record<string, number> | undefined {
  if (!trajectory?.versions) return undefined;
  const counts: Record<string, number> = {};
  trajectory.versions.forEach((v, i) => {
    if (trajectory.lossMask[i] === 1) counts[v] = (counts[v] ?? 0) + 1;
  });
  return counts;
}

export function summarize(
  id: string,
  r: Pick<EpisodeRecord, 'outcome' | 'reward' | 'finishReason' | 'cause' | 'usage' | 'worker' | 'weightVersion'> &
    Partial<Pick<EpisodeRecord, 'trajectory'>>,
): EpisodeSummary {
  const versions = versionTokens(r.trajectory);
  return {
    id,
    outcome: r.outcome,
    reward: r.reward,
    finishReason: r.finishReason,
    ...(r.cause ? { cause: r.cause.slice(0, 500) } : {}),
    policyTokens: r.usage.policy.output,
    ...(r.worker ? { worker: r.worker } : {}),
    ...(r.weightVersion === undefined ? {} : { weightVersion: r.weightVersion }),
    ...(versions && Object.keys(versions).length ? { versionTokens: versions } : {}),
  };
}

/** A failure of the connection or the server (not of the data): worth trying the same statement again. */
export function isTransientDatabaseError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && /^(08|53|57P0|40001|40P01)/.test(code)) return true;
  if (typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN)$/.test(code))
    return true;
  return /Connection terminated|connection timeout|timeout expired/i.test((err as Error)?.message ?? '');
}

/**
 * Runs one save until it succeeds, retrying transient database failures with backoff (`onWait` heartbeats
 * meanwhile). A finished episode is expensive (minutes of model time) and is never re-run because its
 * save failed once; any other error (a bug, bad data) is rethrown at once.
 */
export async function retryingSave<T>(
  save: () => Promise<T>,
  options: { attempts?: number; firstDelayMs?: number; onWait?: (attempt: number, err: unknown) => void } = {},
): Promise<T> {
  const { attempts = 6, firstDelayMs = 1000 } = options;
  for (let attempt = 1; ; attempt++) {
    try {
      return await save();
    } catch (err) {
      if (attempt >= attempts || !isTransientDatabaseError(err)) throw err;
      options.onWait?.(attempt, err);
      await new Promise((resolve) => setTimeout(resolve, firstDelayMs * 2 ** (attempt - 1)));
    }
  }
}

/**
 * The finished episode with this id, if any. A `running` row is a crashed attempt and an `infrastructure_error`
 * row an attempt the infrastructure spoiled: neither counts, so a retry of the activity runs the episode again.
 */
export async function findFinishedEpisode(db: pg.ClientBase, id: string): Promise<EpisodeSummary | undefined> {
  const { rows } = await db.query<{ record: EpisodeRecord }>(
    `SELECT record FROM episodes WHERE id = $1 AND status NOT IN ('running', 'infrastructure_error')`,
    [id],
  );
  return rows[0] ? summarize(id, rows[0].record) : undefined;
}

/** Claims the episode for one attempt (a later attempt takes over a crashed or infrastructure-errored one). */
export async function markEpisodeRunning(db: pg.ClientBase, meta: EpisodeMeta, attempt: string): Promise<void> {
  await db.query(
    `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, step, group_index, repetition,
                           status, policy_model, attempt)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'running', $11, $12)
     ON CONFLICT (id) DO UPDATE SET status = 'running', started_at = now(), attempt = EXCLUDED.attempt
     WHERE episodes.status IN ('running', 'infrastructure_error')`,
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
 * or finished first: its record (trajectory and reward together) is the one that counts. NUL characters
 * and lone surrogates (which Postgres refuses) are replaced first; `unstorableCharacters` counts them.
 */
export async function saveEpisode(
  db: pg.ClientBase,
  id: string,
  finished: EpisodeRecord,
  attempt: string,
): Promise<boolean> {
  const { value: record, replaced } = storableValue(finished);
  if (replaced > 0) record.unstorableCharacters = replaced;
  const r = await db.query(
    `UPDATE episodes SET status = $2, reward = $3, finish_reason = $4, cause = $5, record = $6, finished_at = now() ` +
      `WHERE id = $1 AND status = 'running' AND attempt = $7`,
    [
      id,
      record.outcome,
      record.outcome === 'infrastructure_error' || record.outcome === 'task_error' ? null : record.reward,
      record.finishReason,
      record.cause ?? null,
      JSON.stringify(record),
      attempt,
    ],
  );
  return r.rowCount === 1;
}

/**
 * The crash suite's turn-level resume scenario (`npm run test:crash -- --scenario resume`, scripts/crash-test.ts):
 * what the kills found in `episode_turns` (the saved turns of running episodes) and the checks of the stored
 * episodes after the campaign. Each interrupted episode must resume at its last completed turn (a `resume` entry of
 * its record whose `fromTurn` is the turns saved at the kill, or more when a save raced the kill) without starting
 * over, and its final token trajectory must hold, turn by turn, the tokens that were saved before the kill.
 * The pure functions take fabricated rows in test/unit/crash-resume-checks.test.ts.
 */
import type pg from 'pg';
import { withClient } from '../infra/control-database.ts';
import { check, type Check } from './campaign-run-checks.ts';

/** One row of `episode_turns` as a kill found it: a completed agent turn of a running episode. */
export interface SavedTurnRow {
  episodeId: string;
  turn: number;
  attempt: string;
  /** `checkpoint->'generation'->'sampled'->'tokenIds'`: the turn's sampled token ids (token mode), null when absent. */
  tokenIds: number[] | null;
}

/** An episode a kill interrupted after it had saved turns, with those turns as they were at the kill. */
export interface Interruption {
  /** 1-based number of the kill. */
  kill: number;
  episodeId: string;
  /** The attempt that was running when the worker died (the attempt of its latest saved turn). */
  attempt: string;
  /** Turns 0..savedTurns-1 were saved when the worker died. */
  savedTurns: number;
  /** Each saved turn's sampled token ids, by turn (the reference the resumed trajectory must start with). */
  tokenIds: (number[] | null)[];
  /** Turns below savedTurns without a row (a hole: saved turns must be a prefix). */
  missingTurns: number[];
}

/** One entry of a stored episode record's `resume`: an attempt that found saved turns. */
export interface ResumeEntry {
  attempt: string;
  /** First turn played live: the number of turns restored. */
  fromTurn: number;
  replayedToolCalls: number;
  /** Why the replay diverged and the episode started over from its prompt. */
  restartedFromPrompt?: string;
}

/** A stored episode after the campaign, as the checks read it. */
export interface StoredEpisode {
  id: string;
  status: string;
  resume: ResumeEntry[] | null;
  trajectory: { tokenIds: number[]; lossMask: number[] } | null;
}

/** Attempts already seen dead (snapshots after earlier kills): their rows stay until the episode finishes. */
export type DeadAttempts = Set<string>;

/** True when a live attempt (one no kill has seen) has saved a turn: a kill now lands inside a multi-turn episode. */
export function liveSavedTurn(rows: readonly SavedTurnRow[], dead: DeadAttempts): boolean {
  return rows.some((r) => !dead.has(r.attempt));
}

/**
 * The episodes a kill interrupted, from the `episode_turns` rows read right after it (the worker is dead, so
 * nothing saves in between). An episode whose latest saved turn belongs to an attempt an earlier kill already
 * found dead (its retry has saved nothing new yet) is not counted again. Every attempt in the rows joins `dead`.
 */
export function interruptionsAt(kill: number, rows: readonly SavedTurnRow[], dead: DeadAttempts): Interruption[] {
  const byEpisode = new Map<string, SavedTurnRow[]>();
  for (const r of rows) byEpisode.set(r.episodeId, [...(byEpisode.get(r.episodeId) ?? []), r]);
  const found: Interruption[] = [];
  for (const [episodeId, turns] of [...byEpisode].sort(([a], [b]) => a.localeCompare(b))) {
    const latest = turns.reduce((a, b) => (b.turn > a.turn ? b : a));
    if (dead.has(latest.attempt)) continue;
    const savedTurns = latest.turn + 1;
    const byTurn = new Map(turns.map((t) => [t.turn, t]));
    const missingTurns = Array.from({ length: savedTurns }, (_, i) => i).filter((i) => !byTurn.has(i));
    const tokenIds = Array.from({ length: savedTurns }, (_, i) => byTurn.get(i)?.tokenIds ?? null);
    found.push({ kill, episodeId, attempt: latest.attempt, savedTurns, tokenIds, missingTurns });
  }
  for (const r of rows) dead.add(r.attempt);
  return found;
}

/** The sampled stretches of a token trajectory (runs of loss mask 1): one per generation, in order. */
export function sampledSegments(trajectory: { tokenIds: number[]; lossMask: number[] }): number[][] {
  const segments: number[][] = [];
  let open = false;
  trajectory.tokenIds.forEach((t, i) => {
    if (trajectory.lossMask[i] !== 1) {
      open = false;
      return;
    }
    if (!open) segments.push([]);
    open = true;
    segments.at(-1)!.push(t);
  });
  return segments;
}

/**
 * The resume entry of the attempt that followed the interrupted one: the first entry after the interrupted
 * attempt's own (an interrupted attempt that was itself a resume has one), or the first entry when it has none.
 */
export function resumeAfter(interruption: Interruption, entries: readonly ResumeEntry[]): ResumeEntry | undefined {
  const own = entries.findIndex((e) => e.attempt === interruption.attempt);
  return entries.slice(own + 1).find((e) => e.attempt !== interruption.attempt);
}

/**
 * Why the final trajectory does not start with the turns saved at the kill; undefined when it does. Compared as the
 * sampled tokens (loss mask 1) in order: two generations with no observation between them (a turn cut at its token
 * cap goes on) make one stretch of the trajectory.
 */
export function trajectoryMismatch(interruption: Interruption, stored: StoredEpisode | undefined): string | undefined {
  if (!stored?.trajectory) return 'no token trajectory stored';
  if (interruption.tokenIds.some((t) => t === null)) return 'a saved turn has no generation.sampled.tokenIds';
  const saved = (interruption.tokenIds as number[][]).flat();
  const sampled = sampledSegments(stored.trajectory).flat();
  if (sampled.length < saved.length)
    return `the trajectory has ${sampled.length} sampled tokens, the saved turns ${saved.length}`;
  const at = saved.findIndex((t, i) => sampled[i] !== t);
  if (at >= 0)
    return `sampled token ${at}: saved ${saved[at]}, stored ${sampled[at]} (of ${saved.length} saved tokens)`;
  return undefined;
}

/** The tally of the summary line. */
export interface ResumeTally {
  kills: number;
  interrupted: number;
  resumed: number;
  restarted: number;
  turnsSaved: number;
  trajectoriesEqual: number;
}

/** The episode id without the campaign id (`step-<n>/<uid>#<rep>`), for shorter details. */
const keyOf = (id: string) => id.slice(id.indexOf('/') + 1);

/**
 * The scenario's checks: a kill landed in a multi-turn episode; every interrupted episode resumed at its last
 * completed turn (not started over); its trajectory starts with the turns saved at the kill; no saved turn is left
 * once the campaign is done (`leftRows`: rows of the campaign in `episode_turns` after the end).
 */
export function resumeChecks(
  kills: { killed: string[] }[],
  interruptions: readonly Interruption[],
  stored: ReadonlyMap<string, StoredEpisode>,
  leftRows: number,
): { checks: Check[]; tally: ResumeTally } {
  const tally: ResumeTally = {
    kills: kills.filter((k) => k.killed.length > 0).length,
    interrupted: interruptions.length,
    resumed: 0,
    restarted: 0,
    turnsSaved: interruptions.reduce((a, i) => a + i.savedTurns, 0),
    trajectoriesEqual: 0,
  };
  const resumeProblems: string[] = [];
  const resumedAt: string[] = [];
  const trajectoryProblems: string[] = [];
  for (const i of interruptions) {
    const episode = stored.get(i.episodeId);
    const name = `${keyOf(i.episodeId)} (kill ${i.kill}, ${i.savedTurns} saved)`;
    const entry = resumeAfter(i, episode?.resume ?? []);
    if (i.missingTurns.length) resumeProblems.push(`${name}: no saved row for turn(s) ${i.missingTurns.join(', ')}`);
    if (!episode) resumeProblems.push(`${name}: no stored episode`);
    else if (['running', 'infrastructure_error'].includes(episode.status))
      resumeProblems.push(`${name}: stored ${episode.status}`);
    if (!entry) resumeProblems.push(`${name}: no resume entry after attempt ${i.attempt}`);
    else if (entry.restartedFromPrompt !== undefined) {
      tally.restarted += 1;
      resumeProblems.push(`${name}: started over from the prompt (${entry.restartedFromPrompt})`);
    } else if (entry.fromTurn < i.savedTurns) resumeProblems.push(`${name}: resumed from turn ${entry.fromTurn}`);
    else {
      tally.resumed += 1;
      resumedAt.push(`${name} -> ${entry.fromTurn}${entry.fromTurn > i.savedTurns ? ' (saved after the kill)' : ''}`);
    }
    const mismatch = trajectoryMismatch(i, episode);
    if (mismatch) trajectoryProblems.push(`${name}: ${mismatch}`);
    else tally.trajectoriesEqual += 1;
  }
  const checks = [
    check(
      'the fault was injected: rollout worker killed inside multi-turn episodes',
      tally.kills > 0 && interruptions.length > 0,
      `${tally.kills}/${kills.length} kill(s) found a worker, ${interruptions.length} episode(s) interrupted with ` +
        `${tally.turnsSaved} saved turn(s)`,
    ),
    check(
      'every interrupted episode resumed at its last completed turn',
      interruptions.length > 0 && resumeProblems.length === 0,
      resumeProblems.join('; ') || resumedAt.join(', ') || 'no interrupted episode',
    ),
    check(
      'resumed trajectories start with the turns saved before the kill',
      interruptions.length > 0 && trajectoryProblems.length === 0,
      trajectoryProblems.join('; ') ||
        `${tally.trajectoriesEqual}/${interruptions.length} equal, ${tally.turnsSaved} turn(s) compared token by token`,
    ),
    check(
      'no saved turn left once the campaign is done',
      leftRows === 0,
      leftRows ? `${leftRows} episode_turns row(s) of the campaign remain` : 'none',
    ),
  ];
  return { checks, tally };
}

/** The summary line: `crash-resume: kills=K interrupted=E resumed=R restarted=S turns_saved=T ...`. */
export function resumeLine(t: ResumeTally, ok: boolean): string {
  return (
    `crash-resume: kills=${t.kills} interrupted=${t.interrupted} resumed=${t.resumed} restarted=${t.restarted} ` +
    `turns_saved=${t.turnsSaved} trajectories_equal=${t.trajectoriesEqual}/${t.interrupted} ${ok ? 'ok' : 'FAIL'}`
  );
}

// --- Control database reads -------------------------------------------------------------------------------------

/** Rows of episode_turns whose episode belongs to the campaign (episode ids start with `<campaign>/`). */
const CAMPAIGN_TURNS = `FROM episode_turns WHERE left(episode_id, length($1) + 1) = $1 || '/'`;

/** Every saved turn of the campaign's running episodes, with its sampled token ids. */
export async function savedTurns(c: pg.ClientBase, campaign: string): Promise<SavedTurnRow[]> {
  const { rows } = await c.query<{ episode_id: string; turn: number; attempt: string; token_ids: unknown }>(
    `SELECT episode_id, turn, attempt, checkpoint->'generation'->'sampled'->'tokenIds' AS token_ids ${CAMPAIGN_TURNS}
     ORDER BY episode_id, turn`,
    [campaign],
  );
  return rows.map((r) => ({
    episodeId: r.episode_id,
    turn: r.turn,
    attempt: r.attempt,
    tokenIds: Array.isArray(r.token_ids) ? (r.token_ids as number[]) : null,
  }));
}

/** The campaign's saved turns without their checkpoints: cheap enough to poll. */
export async function savedTurnHeads(c: pg.ClientBase, campaign: string): Promise<SavedTurnRow[]> {
  const { rows } = await c.query<{ episode_id: string; turn: number; attempt: string }>(
    `SELECT episode_id, turn, attempt ${CAMPAIGN_TURNS}`,
    [campaign],
  );
  return rows.map((r) => ({ episodeId: r.episode_id, turn: r.turn, attempt: r.attempt, tokenIds: null }));
}

export async function leftTurnRows(c: pg.ClientBase, campaign: string): Promise<number> {
  const { rows } = await c.query<{ n: string }>(`SELECT count(*) AS n ${CAMPAIGN_TURNS}`, [campaign]);
  return Number(rows[0]!.n);
}

export async function storedEpisodes(c: pg.ClientBase, ids: readonly string[]): Promise<Map<string, StoredEpisode>> {
  const { rows } = await c.query<{ id: string; status: string; resume: unknown; trajectory: unknown }>(
    `SELECT id, status, record->'resume' AS resume, record->'trajectory' AS trajectory
     FROM episodes WHERE id = ANY($1)`,
    [[...ids]],
  );
  return new Map(
    rows.map((r) => [
      r.id,
      {
        id: r.id,
        status: r.status,
        resume: Array.isArray(r.resume) ? (r.resume as ResumeEntry[]) : null,
        trajectory: (r.trajectory as StoredEpisode['trajectory']) ?? null,
      },
    ]),
  );
}

// --- What a suite calls (scripts/crash-test.ts, scripts/fault-test.ts) --------------------------------------------
// A connection per query: an idle one held through a worker restart could drop, and an unheard 'error' would end
// the suite.

/** Polls the campaign's saved turns until a live attempt has saved one; false after `timeoutMs` or once `stop()`. */
export async function waitForLiveSavedTurn(
  url: string,
  campaign: string,
  dead: DeadAttempts,
  timeoutMs: number,
  stop: () => boolean = () => false,
): Promise<boolean> {
  const from = Date.now();
  while (Date.now() - from < timeoutMs && !stop()) {
    if (liveSavedTurn(await withClient(url, (c) => savedTurnHeads(c, campaign)), dead)) return true;
    await new Promise((r) => setTimeout(r, 500));
  }
  return false;
}

/** The episodes kill number `kill` interrupted: read right after it, while nothing can save. */
export async function interruptedNow(
  url: string,
  campaign: string,
  kill: number,
  dead: DeadAttempts,
): Promise<Interruption[]> {
  return interruptionsAt(kill, await withClient(url, (c) => savedTurns(c, campaign)), dead);
}

/** After the campaign ended: the interrupted episodes as stored, the saved turns left, and the checks of them. */
export async function checkResumed(
  url: string,
  campaign: string,
  kills: { killed: string[] }[],
  interruptions: readonly Interruption[],
): Promise<{ checks: Check[]; tally: ResumeTally }> {
  const { stored, left } = await withClient(url, async (c) => ({
    stored: await storedEpisodes(
      c,
      interruptions.map((i) => i.episodeId),
    ),
    left: await leftTurnRows(c, campaign),
  }));
  return resumeChecks(kills, interruptions, stored, left);
}

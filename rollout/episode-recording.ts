import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { withPooledClient } from '../infra/control-database.ts';
import { errorMessage } from '../core/errors.ts';
import { metrics } from '../infra/metrics.ts';
import { taskDomain } from '../task-suites/task-suite-loader.ts';
import { checkEpisodeKeys } from './api-key.ts';
import type { EpisodeTask } from './episode-environment.ts';
import { playEpisode, type EpisodeDependencies, type EpisodeRecord } from './episode-runner.ts';
import { episodeDependencies, episodeEnvironment, episodeRunOptions, type EpisodeBackends } from './episode-setup.ts';
import {
  findFinishedEpisode,
  markEpisodeRunning,
  retryingSave,
  saveEpisode,
  summarize,
  type EpisodeMeta,
  type EpisodeSummary,
} from './episode-store.ts';
import { ServedWeightsWatch, weightExpectation } from './served-weights.ts';
import { findTask } from './task-lookup.ts';
import { clearTurnCheckpoints, loadTurnCheckpoints, saveTurnCheckpoint } from './turn-checkpoint-store.ts';
import { replayableTurns, ReplayDiverged, type ResumeEntry, type TurnCheckpoint } from './turn-checkpoints.ts';

/**
 * An episode played under a caller-chosen id and stored in the control database (messages, tool calls, diff,
 * token ids), so that only ids and a summary travel in workflow payloads. Idempotent: a retry of a finished
 * episode returns the stored summary without playing it again. The episode activity is this, run by Temporal.
 */

/** Which task to play, with what config, and what the episode is for (stored with it). */
export interface EpisodeRequest extends Omit<
  EpisodeMeta,
  'id' | 'suite' | 'scenario' | 'domain' | 'taskUid' | 'policyModel'
> {
  episodeId: string;
  suiteDir: string;
  taskUid: string;
  config: EpisodeConfig;
}

/**
 * What recording needs of the attempt running it (a Temporal activity attempt): its number, heartbeats, log, and the
 * signal that abandons it.
 */
export interface EpisodeAttempt {
  number: number;
  heartbeat(details: unknown): void;
  /**
   * Aborted when the attempt is cancelled (its workflow cancelled or closed, its key given up, the worker shutting
   * down): the episode stops within moments, releases its backend, and nothing of it is stored; the attempt rejects
   * with the signal's reason. The row stays `running`, as a crashed attempt's does, for a later attempt to take over.
   */
  signal?: AbortSignal;
  log: {
    info(message: string, meta?: Record<string, unknown>): void;
    warn(message: string, meta?: Record<string, unknown>): void;
  };
}

export async function recordEpisode(
  request: EpisodeRequest,
  backends: EpisodeBackends,
  controlUrl: string,
  attempt: EpisodeAttempt,
): Promise<EpisodeSummary> {
  const { suite, task } = findTask(request.suiteDir, request.taskUid);
  checkEpisodeKeys(request.config);
  const finished = await withPooledClient(controlUrl, (c) => findFinishedEpisode(c, request.episodeId));
  if (finished) return finished;
  const meta: EpisodeMeta = {
    ...request,
    id: request.episodeId,
    suite: suite.name,
    scenario: task.scenario,
    domain: taskDomain(suite, task.scenario),
    policyModel: request.config.policy.model,
  };
  const attemptId = `${os.hostname()}:${process.pid}:${attempt.number}:${randomUUID()}`;
  await withPooledClient(controlUrl, (c) => markEpisodeRunning(c, meta, attemptId));
  const saved = await withPooledClient(controlUrl, (c) => loadTurnCheckpoints(c, request.episodeId));
  const expected = weightExpectation(request);
  const play = async (replay: TurnCheckpoint[]) => {
    // The version recorded is the one the servers said sampled every completion, not the label asked for.
    const served = expected ? new ServedWeightsWatch(expected) : undefined;
    const deps = episodeDependencies(
      request.config,
      episodeEnvironment(backends, request.config, suite, task),
      task,
      attempt.signal,
      served,
    );
    deps.replay = replay;
    deps.saveTurn = turnSaver(controlUrl, request, attemptId, attempt);
    const played = await playWithHeartbeats(deps, task, request, attempt);
    // Replayed turns were sampled by the version this attempt expects (replayableTurns); live ones say theirs.
    const version = served?.checked() === 0 ? replay.at(-1)?.weightVersion : served?.version();
    if (version !== undefined) played.weightVersion = version;
    return played;
  };
  const record = await playResumed(saved, play, {
    attemptId,
    weightVersion: request.config.policy.weight_version,
    newerWeights: request.config.policy.newer_weights === true,
    log: (message, meta) => attempt.log.warn(message, { episodeId: request.episodeId, ...meta }),
    forget: () => withPooledClient(controlUrl, (c) => clearTurnCheckpoints(c, request.episodeId)),
  });
  record.worker = `${os.hostname()}:${process.pid}`;
  const stored = await retryingSave(
    () => withPooledClient(controlUrl, (c) => saveEpisode(c, request.episodeId, record, attemptId)),
    { onWait: (n) => attempt.heartbeat({ phase: 'saving', retry: n }) },
  );
  if (!stored) return storedByAnotherAttempt(controlUrl, request.episodeId);
  // Stored, even as an infrastructure error, the episode is never played again under its id: its turns go.
  await withPooledClient(controlUrl, (c) => clearTurnCheckpoints(c, request.episodeId)).catch((err) =>
    attempt.log.warn('saved turns of a stored episode not cleared', { error: errorMessage(err) }),
  );
  logOutcome(attempt, request.episodeId, record);
  const { outcome, cause, timings } = record;
  metrics.episodeFinished({ outcome, cause, purpose: request.purpose, seconds: timings.totalMs / 1000 });
  return summarize(request.episodeId, record);
}

/**
 * Plays the episode, replaying the turns an earlier attempt saved (rollout/turn-checkpoints.ts). Turns it cannot use
 * (sampled by other weights), or a replay that diverges from its recording, make it start over from the prompt; the
 * record's `resume` says which, and why.
 */
export async function playResumed(
  saved: TurnCheckpoint[],
  play: (replay: TurnCheckpoint[]) => Promise<EpisodeRecord>,
  at: {
    attemptId: string;
    weightVersion: number | undefined;
    /** Partial rollouts: turns sampled by later versions of the campaign's weights are replayed too. */
    newerWeights?: boolean;
    log: (message: string, meta: Record<string, unknown>) => void;
    /** Forgets the saved turns (the episode starts over). */
    forget: () => Promise<void>;
  },
): Promise<EpisodeRecord> {
  if (saved.length === 0) return play([]);
  const { attemptId, log, forget } = at;
  const { turns, refused } = replayableTurns(saved, at.weightVersion, at.newerWeights);
  const entry: ResumeEntry = {
    attempt: attemptId,
    fromTurn: turns.length,
    savedTurns: saved.length,
    replayedToolCalls: turns.reduce((n, t) => n + t.toolResults.length, 0),
  };
  const restart = async (reason: string) => {
    log('episode starts over from its prompt', { reason });
    Object.assign(entry, { fromTurn: 0, replayedToolCalls: 0, restartedFromPrompt: reason });
    metrics.episodeResumed('restarted');
    await forget();
    return play([]);
  };
  let record: EpisodeRecord;
  if (refused) record = await restart(refused);
  else {
    log('episode resumes at its last completed turn', { turn: turns.length });
    try {
      record = await play(turns);
      metrics.episodeResumed('resumed');
    } catch (err) {
      if (!(err instanceof ReplayDiverged)) throw err;
      record = await restart(`replay diverged: ${err.message}`);
    }
  }
  record.resume = [entry];
  return record;
}

/**
 * Saves each completed turn of this attempt. A save that fails (after a few quick retries) is not the episode's
 * failure: the attempt stops saving, as later turns without it could not be replayed; so does one that finds the
 * episode taken over by another attempt.
 */
function turnSaver(
  controlUrl: string,
  request: EpisodeRequest,
  attemptId: string,
  attempt: EpisodeAttempt,
): (checkpoint: TurnCheckpoint) => Promise<void> {
  let saving = true;
  return async (checkpoint) => {
    if (!saving) return;
    // The version the server said it sampled with, else (a server without the header) the one asked for.
    const weightVersion = checkpoint.generation.servedVersion ?? request.config.policy.weight_version;
    const versioned = weightVersion === undefined ? checkpoint : { ...checkpoint, weightVersion };
    try {
      saving = await retryingSave(
        () => withPooledClient(controlUrl, (c) => saveTurnCheckpoint(c, request.episodeId, attemptId, versioned)),
        { attempts: 3, firstDelayMs: 500 },
      );
    } catch (err) {
      saving = false;
      attempt.log.warn('turn not saved: this attempt saves no later turn', {
        episodeId: request.episodeId,
        turn: checkpoint.turn,
        error: errorMessage(err),
      });
    }
  };
}

/**
 * How often a running episode heartbeats. A heartbeat is also how a cancellation reaches the attempt (the server
 * answers a heartbeat with it), so this bounds how long an abandoned episode holds its sandbox, provided the worker
 * sends heartbeats that often (`maxHeartbeatThrottleInterval`; the SDK's default sends one a minute at most).
 */
export const episodeHeartbeatMs = 5_000;

async function playWithHeartbeats(
  deps: EpisodeDependencies,
  task: EpisodeTask,
  request: EpisodeRequest,
  attempt: EpisodeAttempt,
): Promise<EpisodeRecord> {
  let progress: unknown = { phase: 'starting' };
  // Each heartbeat is a write on the Temporal server. An episode of a few seconds sends none; a longer one reports
  // its turns, and the timer covers a long turn.
  const startedAt = Date.now();
  deps.onTurn = (p) => {
    progress = p;
    if (Date.now() - startedAt >= episodeHeartbeatMs) attempt.heartbeat(p);
  };
  // Heartbeat on a timer too: set-up, a long generation or grading must neither look like a dead worker nor miss
  // a cancellation.
  const beat = setInterval(() => attempt.heartbeat(progress), episodeHeartbeatMs);
  try {
    return await playEpisode(
      deps,
      task,
      `episode:${request.episodeId}`,
      episodeRunOptions(request.config, request.episodeId),
    );
  } finally {
    clearInterval(beat);
  }
}

/** The save lost to another attempt: its stored episode, or a retry until that attempt has stored one. */
async function storedByAnotherAttempt(controlUrl: string, episodeId: string): Promise<EpisodeSummary> {
  const stored = await withPooledClient(controlUrl, (c) => findFinishedEpisode(c, episodeId));
  if (stored) return stored;
  throw new Error(`episode ${episodeId}: another attempt owns it; retrying`);
}

function logOutcome(attempt: EpisodeAttempt, episodeId: string, record: EpisodeRecord): void {
  const outcome = { episodeId, outcome: record.outcome, finishReason: record.finishReason };
  if (record.outcome === 'infrastructure_error' || record.outcome === 'task_error')
    attempt.log.warn(`episode hit ${record.outcome === 'task_error' ? 'a task' : 'an infrastructure'} error`, {
      ...outcome,
      cause: record.cause,
    });
  else
    attempt.log.info('episode finished', {
      ...outcome,
      reward: record.reward,
      seconds: record.timings.totalMs / 1000,
    });
}

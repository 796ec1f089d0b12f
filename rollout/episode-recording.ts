import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { withPooledClient } from '../infra/control-database.ts';
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
  const environment = episodeEnvironment(backends, request.config, suite, task);
  // The version recorded is the one the servers said sampled every completion, not the label asked for.
  const expected = weightExpectation(request);
  const served = expected ? new ServedWeightsWatch(expected) : undefined;
  const deps = episodeDependencies(request.config, environment, task, attempt.signal, served);
  const record = await playWithHeartbeats(deps, task, request, attempt);
  record.worker = `${os.hostname()}:${process.pid}`;
  const servedVersion = served?.version();
  if (servedVersion !== undefined) record.weightVersion = servedVersion;
  const saved = await retryingSave(
    () => withPooledClient(controlUrl, (c) => saveEpisode(c, request.episodeId, record, attemptId)),
    { onWait: (n) => attempt.heartbeat({ phase: 'saving', retry: n }) },
  );
  if (!saved) return storedByAnotherAttempt(controlUrl, request.episodeId);
  logOutcome(attempt, request.episodeId, record);
  const { outcome, cause, timings } = record;
  metrics.episodeFinished({ outcome, cause, purpose: request.purpose, seconds: timings.totalMs / 1000 });
  return summarize(request.episodeId, record);
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

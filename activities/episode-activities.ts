import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { Context } from '@temporalio/activity';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { thinkingboxSettingsSchema, toEndpoint, type ThinkingboxSettings } from '../config/episode-config.ts';
import type { ImportedTask } from '../config/thinkingbox-schema.ts';
import { BadInputError, errorMessage } from '../core/errors.ts';
import { toTemporalFailure } from './temporal-failure.ts';
import { cyrb53 } from '../core/seeded-choice.ts';
import type { Scenario } from '../config/task-schema.ts';
import { withPooledClient } from '../infra/control-database.ts';
import { sandboxEnvironment, type EpisodeEnvironment, type EpisodeTask } from '../rollout/episode-environment.ts';
import { checkEpisodeKeys } from '../rollout/api-key.ts';
import { createJudge } from '../rollout/judge-client.ts';
import { runEpisode, type EpisodeDependencies, type EpisodeOptions } from '../rollout/episode-runner.ts';
import {
  findFinishedEpisode,
  markEpisodeRunning,
  retryingSave,
  saveEpisode,
  summarize,
  type EpisodeMeta,
  type EpisodeSummary,
} from '../rollout/episode-store.ts';
import { createChatDriver, createTokenDriver } from '../rollout/policy-driver.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { createSimulatedUser } from '../rollout/simulated-user.ts';
import {
  loadSuites,
  formatProblem,
  taskDomain,
  type AnySuite,
  type LoadedTask,
  type Suite,
  type ThinkingBoxSuite,
} from '../task-suites/task-suite-loader.ts';
import type { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { StdioServerPool } from '../datasets/thinkingbox/stdio-server-pool.ts';
import { thinkingboxEnvironment, type ThinkingBoxResources } from '../datasets/thinkingbox/thinkingbox-environment.ts';

/**
 * The episode as a Temporal activity. Its payloads carry only ids and a summary; the episode itself
 * (messages, tool calls, diff, token ids) is stored in the control database under the episode id.
 * Idempotent: a retry of a finished episode returns the stored summary without running it again.
 */

export interface EpisodeActivityInput extends Omit<
  EpisodeMeta,
  'id' | 'suite' | 'scenario' | 'domain' | 'taskUid' | 'policyModel'
> {
  episodeId: string;
  suiteDir: string;
  taskUid: string;
  config: EpisodeConfig;
}

export type AnyTask = LoadedTask | ThinkingBoxSuite['tasks'][number];

const suiteCache = new Map<string, AnySuite>();

export function findTask(suiteDir: string, uid: string): { suite: AnySuite; task: AnyTask } {
  let suite = suiteCache.get(suiteDir);
  if (!suite) {
    const { suites, problems } = loadSuites(suiteDir);
    if (problems.length)
      throw new BadInputError(
        `task suite ${suiteDir} has problems:\n${problems.slice(0, 10).map(formatProblem).join('\n')}`,
      );
    suite = suites[0]!;
    suiteCache.set(suiteDir, suite);
  }
  const task = (suite.tasks as AnyTask[]).find((t) => t.uid === uid);
  if (!task) throw new BadInputError(`task '${uid}' not found in ${suiteDir}`);
  return { suite, task };
}

/** The native task of a native suite (tools that only handle native tasks). */
export function findNativeTask(suiteDir: string, uid: string): { suite: Suite; task: LoadedTask; scenario: Scenario } {
  const { suite, task } = findTask(suiteDir, uid);
  if (suite.kind !== 'native')
    throw new BadInputError(`${suiteDir} is an imported ThinkingBox suite; this needs a native suite`);
  return { suite, task: task as LoadedTask, scenario: suite.scenarios[(task as LoadedTask).scenario]! };
}

/**
 * A configured seed is combined with the episode id: one seed for every rollout of a group would make the
 * G rollouts identical (zero variance), while a per-episode seed keeps a rerun of the same episode the same.
 */
export function episodeOptions(config: EpisodeConfig, episodeId = ''): EpisodeOptions {
  const seed = config.sampling.seed === undefined ? undefined : cyrb53(episodeId, config.sampling.seed) % 2 ** 31;
  return {
    sampling: {
      temperature: config.sampling.temperature,
      topP: config.sampling.top_p,
      topK: config.sampling.top_k,
      seed,
      stop: config.sampling.stop,
    },
    limits: {
      maxAgentTurns: config.limits.max_agent_turns,
      maxTokensPerTurn: config.limits.max_tokens_per_turn,
      episodeTokenBudget: config.limits.episode_token_budget,
      wallClockMs: config.limits.wall_clock_ms,
    },
    prompt: { toolsInPrompt: config.prompt.tools_in_prompt, example: config.prompt.example },
  };
}

/** What a worker holds to open episode backends: the sandbox pool for native tasks, tool servers for imported ones. */
export interface EpisodeBackends {
  pool: SandboxPool;
  grader: TerminalStateGrader;
  /** Created on first use (starting tool servers costs nothing until an imported task runs). */
  thinkingbox?: (config: EpisodeConfig) => ThinkingBoxResources;
}

export function episodeEnvironment(
  backends: EpisodeBackends,
  config: EpisodeConfig,
  suite: AnySuite,
  task: AnyTask,
): EpisodeEnvironment {
  if (suite.kind === 'native')
    return sandboxEnvironment(backends.pool, backends.grader, suite.scenarios[task.scenario]!, task as LoadedTask);
  if (!backends.thinkingbox) throw new BadInputError('this worker cannot run imported ThinkingBox tasks');
  return thinkingboxEnvironment(backends.thinkingbox(config), suite, task as ImportedTask);
}

export function episodeDependencies(
  config: EpisodeConfig,
  environment: EpisodeEnvironment,
  task: EpisodeTask,
): EpisodeDependencies {
  return {
    environment,
    policy:
      config.policy.mode === 'tokens'
        ? createTokenDriver(toEndpoint(config.policy))
        : createChatDriver(toEndpoint(config.policy)),
    user: createSimulatedUser(
      config.user.mode === 'llm'
        ? { mode: 'llm', endpoint: toEndpoint(config.user.endpoint), temperature: config.user.temperature }
        : { mode: 'scripted' },
      task,
    ),
    judge: config.judge ? createJudge(toEndpoint(config.judge)) : undefined,
  };
}

export function thinkingboxResources(
  settings: ThinkingboxSettings = thinkingboxSettingsSchema.parse(undefined),
  servers?: StdioServerPool,
): ThinkingBoxResources {
  return {
    servers:
      servers ??
      new StdioServerPool({
        warm: settings.warm_processes,
        startTimeoutMs: settings.server_start_timeout_ms,
      }),
    testTimeoutMs: settings.test_timeout_ms,
    nativeGrading: settings.native_grading,
  };
}

export interface LazyThinkingboxResources {
  (config: EpisodeConfig): ThinkingBoxResources;
  /** Stops the warm tool-server processes (they would keep the process alive). */
  close(): Promise<void>;
}

/** Tool-server resources for imported tasks, created by the first such episode and shared by the worker's others. */
export function thinkingboxResourcesFactory(): LazyThinkingboxResources {
  let servers: StdioServerPool | undefined;
  // The process pool is shared (sized by the first imported episode); the other settings follow each episode's config.
  const get = (config: EpisodeConfig) => {
    const resources = thinkingboxResources(config.thinkingbox, servers);
    servers = resources.servers;
    return resources;
  };
  return Object.assign(get, { close: async () => servers?.close() });
}

export function createEpisodeActivities(deps: {
  pool: SandboxPool;
  grader: TerminalStateGrader;
  controlUrl: string;
  thinkingbox?: EpisodeBackends['thinkingbox'];
}) {
  const backends: EpisodeBackends = {
    pool: deps.pool,
    grader: deps.grader,
    thinkingbox: deps.thinkingbox ?? thinkingboxResourcesFactory(),
  };
  return {
    async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
      try {
        const { suite, task } = findTask(input.suiteDir, input.taskUid);
        checkEpisodeKeys(input.config);
        const finished = await withPooledClient(deps.controlUrl, (c) => findFinishedEpisode(c, input.episodeId));
        if (finished) return finished;
        const meta: EpisodeMeta = {
          ...input,
          id: input.episodeId,
          suite: suite.name,
          scenario: task.scenario,
          domain: taskDomain(suite, task.scenario),
          policyModel: input.config.policy.model,
        };
        const ctx = Context.current();
        const attempt = `${os.hostname()}:${process.pid}:${ctx.info.attempt}:${randomUUID()}`;
        await withPooledClient(deps.controlUrl, (c) => markEpisodeRunning(c, meta, attempt));
        const episodeDeps = episodeDependencies(
          input.config,
          episodeEnvironment(backends, input.config, suite, task),
          task,
        );
        let progress: unknown = { phase: 'starting' };
        // Each heartbeat is a write on the Temporal server. An episode of a few seconds sends none (the 90 s
        // heartbeat timeout is far off); a longer one reports its turns, and the timer covers a long turn.
        const startedAt = Date.now();
        episodeDeps.onTurn = (p) => {
          progress = p;
          if (Date.now() - startedAt >= 5_000) ctx.heartbeat(p);
        };
        // Heartbeat on a timer too: set-up, a long generation or grading must not look like a dead worker.
        const beat = setInterval(() => ctx.heartbeat(progress), 20_000);
        let record;
        try {
          record = await runEpisode(
            episodeDeps,
            task,
            `episode:${input.episodeId}`,
            episodeOptions(input.config, input.episodeId),
          );
        } finally {
          clearInterval(beat);
        }
        record.worker = `${os.hostname()}:${process.pid}`;
        if (input.config.policy.weight_version !== undefined) record.weightVersion = input.config.policy.weight_version;
        const saved = await retryingSave(
          () => withPooledClient(deps.controlUrl, (c) => saveEpisode(c, input.episodeId, record, attempt)),
          { onWait: (n) => ctx.heartbeat({ phase: 'saving', retry: n }) },
        );
        if (!saved) {
          const stored = await withPooledClient(deps.controlUrl, (c) => findFinishedEpisode(c, input.episodeId));
          if (stored) return stored;
          throw new Error(`episode ${input.episodeId}: another attempt owns it; retrying`);
        }
        const outcome = { episodeId: input.episodeId, outcome: record.outcome, finishReason: record.finishReason };
        if (record.outcome === 'infrastructure_error')
          ctx.log.warn('episode hit an infrastructure error', {
            ...outcome,
            cause: record.cause,
          });
        else
          ctx.log.info('episode finished', {
            ...outcome,
            reward: record.reward,
            seconds: record.timings.totalMs / 1000,
          });
        return summarize(input.episodeId, record);
      } catch (err) {
        Context.current().log.warn('episode attempt failed', { episodeId: input.episodeId, error: errorMessage(err) });
        throw toTemporalFailure(err);
      }
    },
  };
}

export type EpisodeActivities = ReturnType<typeof createEpisodeActivities>;

import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { toEndpoint } from '../config/episode-config.ts';
import { END_TURN_TOOL } from '../core/agent-prompt.ts';
import { BadInputError } from '../core/errors.ts';
import { cyrb53 } from '../core/seeded-choice.ts';
import type { Scenario } from '../config/task-schema.ts';
import { withClient } from '../infra/control-database.ts';
import { createJudge } from './judge-client.ts';
import { runEpisode, type EpisodeDependencies, type EpisodeOptions } from './episode-runner.ts';
import { findFinishedEpisode, markEpisodeRunning, saveEpisode, summarize, type EpisodeMeta, type EpisodeSummary } from './episode-store.ts';
import { createChatDriver, createTokenDriver } from './policy-driver.ts';
import type { SandboxPool } from './sandbox-pool.ts';
import { createSimulatedUser } from './simulated-user.ts';
import { loadSuites, formatProblem, type LoadedTask, type Suite } from './task-suite-loader.ts';
import type { TerminalStateGrader } from './terminal-state-grader.ts';

/**
 * The episode as a Temporal activity. Its payloads carry only ids and a summary; the episode itself
 * (messages, tool calls, diff, token ids) is stored in the control database under the episode id.
 * Idempotent: a retry of a finished episode returns the stored summary without running it again.
 */

export interface EpisodeActivityInput extends Omit<EpisodeMeta, 'id' | 'suite' | 'scenario' | 'domain' | 'taskUid' | 'policyModel'> {
  episodeId: string;
  suiteDir: string;
  taskUid: string;
  config: EpisodeConfig;
}

const suiteCache = new Map<string, Suite>();

export function findTask(suiteDir: string, uid: string): { suite: Suite; task: LoadedTask } {
  let suite = suiteCache.get(suiteDir);
  if (!suite) {
    const { suites, problems } = loadSuites(suiteDir);
    if (problems.length) throw new BadInputError(`task suite ${suiteDir} has problems:\n${problems.slice(0, 10).map(formatProblem).join('\n')}`);
    suite = suites[0]!;
    suiteCache.set(suiteDir, suite);
  }
  const task = suite.tasks.find((t) => t.uid === uid);
  if (!task) throw new BadInputError(`task '${uid}' not found in ${suiteDir}`);
  return { suite, task };
}

/**
 * A configured seed is combined with the episode id: one seed for every rollout of a group would make the
 * G rollouts identical (zero variance), while a per-episode seed keeps a rerun of the same episode the same.
 */
export function episodeOptions(config: EpisodeConfig, episodeId = ''): EpisodeOptions {
  const seed = config.sampling.seed === undefined ? undefined : cyrb53(episodeId, config.sampling.seed) % 2 ** 31;
  return {
    sampling: { temperature: config.sampling.temperature, topP: config.sampling.top_p, seed, stop: config.sampling.stop },
    limits: { maxAgentTurns: config.limits.max_agent_turns, maxTokensPerTurn: config.limits.max_tokens_per_turn, episodeTokenBudget: config.limits.episode_token_budget, wallClockMs: config.limits.wall_clock_ms },
    prompt: { toolsInPrompt: config.prompt.tools_in_prompt, example: config.prompt.example },
  };
}

export function episodeDependencies(config: EpisodeConfig, pool: SandboxPool, grader: TerminalStateGrader, task: LoadedTask, scenario?: Scenario): EpisodeDependencies {
  const policyEndpoint = toEndpoint(config.policy);
  // Tools not described in the system prompt go to the server, whose chat template renders them.
  const tools = config.prompt.tools_in_prompt || !scenario
    ? undefined
    : [...scenario.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.input_schema as Record<string, unknown> })), END_TURN_TOOL]
        .map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.inputSchema } }));
  return {
    pool,
    grader,
    policy: config.policy.mode === 'tokens' ? createTokenDriver(policyEndpoint, tools) : createChatDriver(policyEndpoint, tools),
    user: createSimulatedUser(config.user.mode === 'llm' ? { mode: 'llm', endpoint: toEndpoint(config.user.endpoint), temperature: config.user.temperature } : { mode: 'scripted' }, task),
    judge: config.judge ? createJudge(toEndpoint(config.judge)) : undefined,
  };
}

export function createEpisodeActivities(deps: { pool: SandboxPool; grader: TerminalStateGrader; controlUrl: string }) {
  return {
    async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
      try {
        const { suite, task } = findTask(input.suiteDir, input.taskUid);
        const scenario = suite.scenarios[task.scenario]!;
        const finished = await withClient(deps.controlUrl, (c) => findFinishedEpisode(c, input.episodeId));
        if (finished) return finished;
        const meta: EpisodeMeta = { ...input, id: input.episodeId, suite: suite.name, scenario: scenario.name, domain: scenario.domain ?? scenario.name, policyModel: input.config.policy.model };
        const ctx = Context.current();
        const attempt = `${os.hostname()}:${process.pid}:${ctx.info.attempt}:${randomUUID()}`;
        await withClient(deps.controlUrl, (c) => markEpisodeRunning(c, meta, attempt));
        const episodeDeps = episodeDependencies(input.config, deps.pool, deps.grader, task, scenario);
        let progress: unknown = { phase: 'starting' };
        episodeDeps.onTurn = (p) => ctx.heartbeat((progress = p));
        // Heartbeat on a timer too: set-up, a long generation or grading must not look like a dead worker.
        const beat = setInterval(() => ctx.heartbeat(progress), 20_000);
        let record;
        try {
          record = await runEpisode(episodeDeps, scenario, task, `episode:${input.episodeId}`, episodeOptions(input.config, input.episodeId));
        } finally {
          clearInterval(beat);
        }
        record.worker = `${os.hostname()}:${process.pid}`;
        if (!(await withClient(deps.controlUrl, (c) => saveEpisode(c, input.episodeId, record, attempt)))) {
          const stored = await withClient(deps.controlUrl, (c) => findFinishedEpisode(c, input.episodeId));
          if (stored) return stored;
          throw new Error(`episode ${input.episodeId}: another attempt owns it; retrying`);
        }
        return summarize(input.episodeId, record);
      } catch (err) {
        if (err instanceof BadInputError) throw ApplicationFailure.nonRetryable(err.message, 'BadInput');
        throw err;
      }
    },
  };
}

export type EpisodeActivities = ReturnType<typeof createEpisodeActivities>;

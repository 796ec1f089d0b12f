import type { EpisodeConfig } from '../config/episode-config.ts';
import { toEndpoint } from '../config/episode-config.ts';
import type { ImportedTask } from '../config/thinkingbox-schema.ts';
import { BadInputError } from '../core/errors.ts';
import { cyrb53 } from '../core/seeded-choice.ts';
import { thinkingboxEnvironment, type ThinkingBoxResources } from '../datasets/thinkingbox/thinkingbox-environment.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import type { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import type { AnySuite, LoadedTask } from '../task-suites/task-suite-loader.ts';
import { sandboxEnvironment, type EpisodeEnvironment, type EpisodeTask } from './episode-environment.ts';
import type { EpisodeDependencies, EpisodeOptions } from './episode-runner.ts';
import { createJudge } from './judge-client.ts';
import { createChatDriver, createTokenDriver } from './policy-driver.ts';
import type { ServedWeightsWatch } from './served-weights.ts';
import { createSimulatedUser } from './simulated-user.ts';
import type { AnyTask } from './task-lookup.ts';

/**
 * One episode's set-up from its episode config: the backend it runs against, the policy, user and judge it talks
 * to, and the runner's options. Shared by the episode activity, `tbt episodes run`, tests and benchmarks.
 */

/**
 * A configured seed is combined with the episode id: one seed for every rollout of a group would make the
 * G rollouts identical (zero variance), while a per-episode seed keeps a rerun of the same episode the same.
 */
export function episodeRunOptions(config: EpisodeConfig, episodeId = ''): EpisodeOptions {
  const seed = config.sampling.seed === undefined ? undefined : cyrb53(episodeId, config.sampling.seed) % 2 ** 31;
  return {
    sampling: {
      temperature: config.sampling.temperature,
      topP: config.sampling.top_p,
      topK: config.sampling.top_k,
      seed,
      stop: config.sampling.stop,
      parallelToolCalls: config.sampling.parallel_tool_calls,
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

/**
 * `signal` abandons the episode: it reaches the runner and every client, which abort their requests in flight.
 * `servedWeights` checks every policy completion against the weights the episode expects (rollout/served-weights.ts).
 */
export function episodeDependencies(
  config: EpisodeConfig,
  environment: EpisodeEnvironment,
  task: EpisodeTask,
  signal?: AbortSignal,
  servedWeights?: ServedWeightsWatch,
): EpisodeDependencies {
  const policy = { ...toEndpoint(config.policy), ...(servedWeights ? { servedWeights } : {}) };
  return {
    environment,
    policy:
      config.policy.mode === 'tokens'
        ? createTokenDriver(policy, signal, config.policy.weight_version)
        : createChatDriver(policy, signal),
    user: createSimulatedUser(
      config.user.mode === 'llm'
        ? {
            mode: 'llm',
            // No endpoint of its own: the policy's server plays the user (no other model needed).
            endpoint: toEndpoint(config.user.endpoint ?? config.policy),
            temperature: config.user.temperature,
            maxTokens: config.user.max_tokens,
          }
        : { mode: 'scripted' },
      task,
      signal,
    ),
    judge: config.judge ? createJudge({ ...toEndpoint(config.judge), mode: config.judge_mode }, signal) : undefined,
    ...(signal ? { signal } : {}),
  };
}

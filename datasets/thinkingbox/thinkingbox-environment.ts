import type { ImportedScenario, ImportedTask } from '../../config/thinkingbox-schema.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../../core/errors.ts';
import type { EpisodeEnvironment, OpenedEnvironment } from '../../rollout/episode-environment.ts';
import { datasetEnvironment } from './dataset-environment.ts';
import { gradeEpisode, type EpisodeGrading } from './episode-grading.ts';
import { episodeToolRoutes, type ToolRoute } from './episode-tool-routes.ts';
import { startEpisodeServers, stopEpisodeServers } from './episode-tool-servers.ts';
import { formatWithInit } from './format-query.ts';
import { episodeHistory, replayHistory } from './history-replay.ts';
import type { ThinkingBoxSuite } from './imported-suite.ts';
import type { JudgeLimits } from './judge-limits.ts';
import { initServers } from './reserved-tools.ts';
import { routedToolSession } from './routed-tool-session.ts';
import type { StartedServer, StdioServerPool } from './stdio-server-pool.ts';

/**
 * A ThinkingBox task's episode backend: the dataset's tool servers started for this episode (warm pool),
 * seeded by `__reserved__init` with the task's merged world_state, the scenario's visible tools as the
 * agent's tool session (after the task's history, if any, is replayed into them: its tool calls, in order), the
 * terminal state from `__reserved__geteffects`, and grading by the task's test
 * code (or the native fast path for the common hash-and-rubrics body). `__reserved__teardown` and a stop of
 * every process end the episode.
 */

export interface ThinkingBoxResources {
  servers: StdioServerPool;
  testTimeoutMs: number;
  /** Grade the recognised common test body natively instead of in Python. */
  nativeGrading: boolean;
  toolTimeoutMs?: number;
  /** What one test case may ask of the judge (default: episode.thinkingbox's defaults). */
  judgeLimits?: JudgeLimits;
}

/** The domain prompt: the scenario's bot_instructions followed by the test's own (the agent prompt is separate). */
export function botInstructions(scenario: ImportedScenario, task: ImportedTask): string {
  return [scenario.bot_instructions.trim(), task.bot_instructions?.trim() ?? ''].filter(Boolean).join('\n\n');
}

/**
 * The reference's system messages: the agent's system instructions, then the domain's (each only when set).
 * A policy whose chat template takes one system message gets them merged (rollout/system-message-handling.ts).
 */
export function agentSystemMessages(agentPrompt: string, domain: string): string[] {
  return [agentPrompt.trim(), domain].filter(Boolean);
}

/** A format_query task's query and system messages, with the `{init...}` fields filled from the init result. */
function formattedPrompt(
  scenario: ImportedScenario,
  task: ImportedTask,
  initResult: Record<string, unknown>,
): NonNullable<OpenedEnvironment['formatted']> {
  return {
    query: formatWithInit(task.query, initResult),
    systemMessages: agentSystemMessages(
      scenario.agent_prompt,
      formatWithInit(botInstructions(scenario, task), initResult),
    ),
  };
}

/**
 * Seeds the started servers and routes the episode's tools; on any error the servers are stopped, and an error
 * that is neither bad input nor an infrastructure error is reported as the latter.
 */
async function seedAndRoute(
  servers: StartedServer[],
  scenario: ImportedScenario,
  task: ImportedTask,
  toolTimeoutMs: number,
): Promise<{ initResult: Record<string, unknown>; routes: Map<string, ToolRoute>; replayWarnings: string[] }> {
  try {
    const initResult = await initServers(servers, task.world_state, toolTimeoutMs);
    const routes = await episodeToolRoutes(scenario, servers, Object.keys(task.world_state), toolTimeoutMs);
    const replayWarnings = await replayHistory(task.history, routes, toolTimeoutMs);
    return { initResult, routes, replayWarnings };
  } catch (err) {
    await stopEpisodeServers(servers);
    throw err instanceof BadInputError || err instanceof InfrastructureError
      ? err
      : new InfrastructureError(`tool servers of ${task.uid}: ${errorMessage(err)}`, { cause: err });
  }
}

export function thinkingboxEnvironment(
  resources: ThinkingBoxResources,
  suite: ThinkingBoxSuite,
  task: ImportedTask,
): EpisodeEnvironment {
  const scenario = suite.scenarios[task.scenario];
  if (!scenario) throw new BadInputError(`task ${task.uid}: unknown scenario '${task.scenario}'`);
  const toolTimeoutMs = resources.toolTimeoutMs ?? 30_000;
  return {
    systemMessages: agentSystemMessages(scenario.agent_prompt, botInstructions(scenario, task)),
    examples: [],
    // The test run has its own timeout; geteffects and judge calls on the native path get 5 minutes besides.
    // A test whose own code raises runs twice (task errors, episode-grading.ts).
    gradeTimeoutMs: 2 * resources.testTimeoutMs + 5 * 60_000,
    async open(owner): Promise<OpenedEnvironment> {
      const dataset = datasetEnvironment(suite.imported.server_packages, suite.dir, suite.imported.data_root);
      const servers = await startEpisodeServers(resources.servers, suite, task, dataset);
      const { initResult, routes, replayWarnings } = await seedAndRoute(servers, scenario, task, toolTimeoutMs);
      const history = { ...episodeHistory(task.history), replayWarnings };
      const { tools, directResponses } = routedToolSession(routes, toolTimeoutMs, [...history.directResponses]);
      const grading: EpisodeGrading = {
        task,
        scenario,
        servers,
        initResult,
        directResponses,
        owner,
        python: dataset.python,
        nativeGrading: resources.nativeGrading,
        testTimeoutMs: resources.testTimeoutMs,
        toolTimeoutMs,
        ...(resources.judgeLimits ? { judgeLimits: resources.judgeLimits } : {}),
      };
      return {
        tools,
        ...(task.history.length ? { history } : {}),
        ...(task.format_query ? { formatted: formattedPrompt(scenario, task, initResult) } : {}),
        grade: (request) => gradeEpisode(grading, request),
        close: () => stopEpisodeServers(servers),
      };
    },
  };
}

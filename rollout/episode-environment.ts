import type { Scenario, Task } from '../config/task-schema.ts';
import type { ExampleExchange } from '../core/agent-prompt.ts';
import type { Judge } from './judge-client.ts';
import { openToolSession, type ToolResult, type ToolSession } from './mcp-tool-session.ts';
import type { ChatMessage } from './policy-client.ts';
import type { VisibleTurn } from '../core/user-simulator-prompt.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import type { GradeReport, TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';

/**
 * What an episode runs against: a backend opened fresh for one episode (a Postgres sandbox with our SQL tools,
 * or a ThinkingBox dataset's MCP tool-server processes), its tool session, and the grading of the state it was
 * left in. The episode loop (episode-runner.ts) is the same for every backend.
 */

export interface ToolCallMade {
  name: string;
  arguments: Record<string, unknown>;
  result: string;
  isError: boolean;
}

export interface GradeRequest {
  /** Last visible assistant message (rubrics, `x.response`). */
  lastAssistantText: string;
  toolCalls: ToolCallMade[];
  /** The whole conversation as the agent saw it (`x.messages` of ThinkingBox tests). */
  messages?: unknown[];
  judge?: Judge;
}

/**
 * A tool result that also carries a direct response (a ThinkingBox `direct_response` tool): text the framework
 * shows as an assistant message once the completion's tool results are in.
 */
export type EnvironmentToolResult = ToolResult & { directResponse?: string };

/** Earlier turns of the conversation (a ThinkingBox task's `history`), shown before the query. */
export interface EpisodeHistory {
  /** As the policy sees them: texts, tool calls and tool results. */
  messages: ChatMessage[];
  /** The visible user and assistant texts, as the simulated user sees them. */
  transcript: VisibleTurn[];
  /** The last assistant reply among them: `x.response` when the agent writes none of its own. */
  lastReply?: string;
  /** Direct responses among them (the start of `x.tool_direct_responses`). */
  directResponses: string[];
  /** Replayed tool calls that failed (the reference's `replay_warnings`; the episode still runs). */
  replayWarnings?: string[];
}

export interface OpenedEnvironment {
  tools: ToolSession;
  /** Earlier turns, already replayed into the backend, to put before the query. */
  history?: EpisodeHistory;
  /** Query and system messages known only once the backend is open (a ThinkingBox `format_query` task). */
  formatted?: { query: string; systemMessages: string[] };
  grade(request: GradeRequest): Promise<GradeReport>;
  /** Releases the backend; never throws. */
  close(): Promise<void>;
}

/** The task fields the episode loop reads, whatever the task format (earlier turns come from the backend). */
export type EpisodeTask = Pick<Task, 'uid' | 'query' | 'user_context' | 'user_replies' | 'limits'>;

export interface EpisodeEnvironment {
  /** Domain policy appended to our agent system prompt (native suites). */
  instructions?: string;
  /**
   * Imported suites: the reference's system messages, sent as they are and in order (agent prompt, then the
   * domain's instructions), instead of our system prompt; the dataset's own tools end the turn, so the loop
   * offers no `end_turn` tool of its own. Set either this or `instructions`.
   */
  systemMessages?: string[];
  examples: ExampleExchange[];
  /**
   * Bound on grading (after the agent is done; not part of the episode's wall clock).
   * Longer = infrastructure error.
   */
  gradeTimeoutMs: number;
  /** Acquires a fresh backend for one episode; `owner` names the episode in leases and logs. */
  open(owner: string): Promise<OpenedEnvironment>;
}

/** A native task: a sandbox database cloned from the scenario template, SQL tools, terminal-state grading. */
export function sandboxEnvironment(
  pool: SandboxPool,
  grader: TerminalStateGrader,
  scenario: Scenario,
  task: Task,
): EpisodeEnvironment {
  return {
    instructions: scenario.instructions,
    examples: scenario.examples,
    gradeTimeoutMs: 5 * 60_000, // a state read, SQL assertions and judge calls (each bounded by the judge timeout)
    async open(owner) {
      const sandbox = await pool.acquire(scenario, owner, { dataPatch: task.data_patch });
      let tools: ToolSession;
      try {
        tools = await openToolSession(scenario, sandbox);
      } catch (err) {
        await pool.release(sandbox).catch(() => undefined);
        throw err;
      }
      return {
        tools,
        grade: ({ lastAssistantText, judge }) => grader.grade({ scenario, task, sandbox, lastAssistantText, judge }),
        async close() {
          await tools.close();
          await pool.release(sandbox).catch(() => undefined);
        },
      };
    },
  };
}

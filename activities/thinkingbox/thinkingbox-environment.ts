import { createHash } from 'node:crypto';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ImportedScenario, ImportedTask, NativeTestPattern } from '../../config/thinkingbox-schema.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import type { StateDifference } from '../../core/canonical-state.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../../core/errors.ts';
import type { EpisodeEnvironment, GradeRequest, OpenedEnvironment } from '../episode-environment.ts';
import type { Judge, JudgeVerdict } from '../judge-client.ts';
import { toolResultText, type ToolResult, type ToolSession, type ToolSpec } from '../mcp-tool-session.ts';
import type { GradeReport } from '../terminal-state-grader.ts';
import type { ThinkingBoxSuite } from './imported-suite.ts';
import type { StartedServer, StdioServerPool } from './stdio-server-pool.ts';
import { runTestCase, type TestContext } from './test-case-runner.ts';

/**
 * A ThinkingBox task's episode backend: the dataset's tool servers started for this episode (warm pool),
 * seeded by `__reserved__init` with the task's merged world_state, the scenario's visible tools as the
 * agent's tool session, the terminal state from `__reserved__geteffects`, and grading by the task's test
 * code (or the native fast path for the common hash-and-rubrics body). `__reserved__teardown` and a stop of
 * every process end the episode.
 */

export interface ThinkingBoxResources {
  servers: StdioServerPool;
  /** Python that runs test code (the dataset environment when set up). */
  python: string;
  testTimeoutMs: number;
  /** Grade the recognised common test body natively instead of in Python. */
  nativeGrading: boolean;
  toolTimeoutMs?: number;
}

const RESERVED = '__reserved__';

/** A server's effects, as `__reserved__geteffects` returns them (only the fields grading reads are typed). */
export interface ServerEffects {
  result_hash?: string;
  golden_hash?: string;
  initial_hash?: string;
  diff?: StateDifference[];
  rubrics?: string[];
  [key: string]: unknown;
}

async function callReserved(
  server: StartedServer,
  tool: string,
  args: Record<string, unknown>,
  timeoutMs: number,
): Promise<unknown> {
  let result;
  try {
    result = await server.client.callTool({ name: `${RESERVED}${tool}`, arguments: args }, CallToolResultSchema, {
      timeout: timeoutMs,
    });
  } catch (err) {
    const tail = server.stderrTail();
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} failed: ${errorMessage(err)}${tail ? `; stderr: ${tail}` : ''}`,
      { cause: err },
    );
  }
  // Joined without separators: a JSON answer may come in several text parts.
  const text = (result.content as { type: string; text?: string }[]).map((c) => c.text ?? '').join('');
  if (result.isError)
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} returned an error: ${text.slice(0, 500)}`,
    );
  try {
    return text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} did not return JSON: ${text.slice(0, 200)}`,
    );
  }
}

export function agentInstructions(scenario: ImportedScenario, task: ImportedTask): string {
  return [scenario.agent_prompt.trim(), (task.bot_instructions ?? scenario.bot_instructions).trim()]
    .filter(Boolean)
    .join('\n\n');
}

/** The native fast path: exactly what the common Python body does, in the same order (so judge calls match). */
export async function gradeNatively(
  pattern: NativeTestPattern,
  effects: Record<string, ServerEffects>,
  response: string,
  judge: Judge | undefined,
): Promise<{ status: 'pass' | 'fail'; message: string; verdicts: JudgeVerdict[] }> {
  const verdicts: JudgeVerdict[] = [];
  for (const server of pattern.servers) {
    const e = effects[server];
    if (!e || typeof e.result_hash !== 'string' || typeof e.golden_hash !== 'string')
      throw new InfrastructureError(`effects of server '${server}' lack result_hash/golden_hash`);
    if (e.result_hash !== e.golden_hash)
      return { status: 'fail', message: `terminal state of '${server}' differs from the golden state`, verdicts };
    if (!pattern.rubrics) continue;
    for (const question of e.rubrics ?? []) {
      if (!judge) throw new BadInputError(`the test asks the judge (rubric '${question}') but no judge is configured`);
      const v = await judge.ask(question, response);
      verdicts.push(v);
      if (!v.yes) return { status: 'fail', message: `rubric answered no: ${question}`, verdicts };
    }
  }
  return { status: 'pass', message: '', verdicts };
}

function combinedHash(effects: Record<string, ServerEffects>, field: 'result_hash' | 'golden_hash'): string {
  return createHash('sha256')
    .update(canonicalJson(Object.fromEntries(Object.entries(effects).map(([s, e]) => [s, e[field] ?? null]))))
    .digest('hex');
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
    instructions: agentInstructions(scenario, task),
    examples: [],
    // The test run has its own timeout; geteffects and judge calls on the native path get 5 minutes besides.
    gradeTimeoutMs: resources.testTimeoutMs + 5 * 60_000,
    async open(_owner) {
      const names = Object.keys(task.world_state);
      for (const name of names)
        if (!suite.imported.servers[name])
          throw new BadInputError(
            `task ${task.uid}: world_state names server '${name}', which servers.yaml does not define`,
          );
      const settled = await Promise.allSettled(
        names.map((name) => resources.servers.acquire(name, suite.imported.servers[name]!)),
      );
      const servers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
      const stopAll = async () => {
        await Promise.all(servers.map((s) => callReserved(s, 'teardown', {}, 5_000).catch(() => undefined)));
        await Promise.all(servers.map((s) => s.stop()));
      };
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) {
        await stopAll();
        throw failed.reason;
      }
      const route = new Map<string, { server: StartedServer; spec: ToolSpec }>();
      try {
        await Promise.all(
          servers.map((s) => callReserved(s, 'init', { config: task.world_state[s.name] ?? {} }, toolTimeoutMs)),
        );
        const offered = new Map<string, { server: StartedServer; spec: ToolSpec }>();
        for (const server of servers) {
          const { tools } = await server.client.listTools(undefined, { timeout: toolTimeoutMs });
          for (const t of tools) {
            if (t.name.startsWith(RESERVED) || offered.has(t.name)) continue;
            offered.set(t.name, {
              server,
              spec: {
                name: t.name,
                description: t.description ?? '',
                inputSchema: t.inputSchema as Record<string, unknown>,
              },
            });
          }
        }
        for (const visible of scenario.tools) {
          const found = offered.get(visible.name);
          if (!found)
            throw new BadInputError(
              `scenario ${scenario.name} (${scenario.file}): visible tool '${visible.name}' is not offered by its servers (${names.join(', ')})`,
            );
          route.set(visible.name, {
            server: found.server,
            spec: {
              ...found.spec,
              ...(visible.description ? { description: visible.description } : {}),
              ...(visible.input_schema ? { inputSchema: visible.input_schema } : {}),
            },
          });
        }
      } catch (err) {
        await stopAll();
        throw err instanceof BadInputError || err instanceof InfrastructureError
          ? err
          : new InfrastructureError(`tool servers of ${task.uid}: ${errorMessage(err)}`, { cause: err });
      }

      const tools: ToolSession = {
        async listTools() {
          return [...route.values()].map((r) => r.spec);
        },
        async callTool(name, args): Promise<ToolResult> {
          const target = route.get(name);
          if (!target)
            return {
              text: `Error: unknown tool '${name}'. Available tools: ${[...route.keys()].join(', ')}`,
              isError: true,
            };
          try {
            const result = await target.server.client.callTool({ name, arguments: args }, CallToolResultSchema, {
              timeout: toolTimeoutMs,
            });
            return { text: toolResultText(result), isError: result.isError === true };
          } catch (err) {
            throw new InfrastructureError(`tool server '${target.server.name}': ${name} failed: ${errorMessage(err)}`, {
              cause: err,
            });
          }
        },
        async close() {},
      };

      const opened: OpenedEnvironment = {
        tools,
        async grade(request: GradeRequest): Promise<GradeReport> {
          const report: GradeReport = {
            outcome: 'agent_failure',
            reward: 0,
            stateMatches: false,
            resultHash: '',
            goldenHash: '',
            diff: [],
            assertions: [],
            rubrics: [],
          };
          try {
            const effects: Record<string, ServerEffects> = {};
            for (const server of servers)
              effects[server.name] = (await callReserved(server, 'geteffects', {}, toolTimeoutMs)) as ServerEffects;
            report.resultHash = combinedHash(effects, 'result_hash');
            report.goldenHash = combinedHash(effects, 'golden_hash');
            report.stateMatches = Object.values(effects).every((e) => e.result_hash === e.golden_hash);
            report.diff = Object.entries(effects).flatMap(([s, e]) =>
              Array.isArray(e.diff) ? e.diff.map((d) => ({ ...d, path: `${s}:${d.path}` })) : [],
            );
            const context: TestContext = {
              effects,
              response: request.lastAssistantText,
              tool_calls: request.toolCalls.map((c) => ({
                name: c.name,
                arguments: c.arguments,
                result: c.result,
                is_error: c.isError,
              })),
            };
            const outcome =
              resources.nativeGrading && task.test.native
                ? await gradeNatively(task.test.native, effects, request.lastAssistantText, request.judge)
                : await runTestCase({
                    file: task.test.file,
                    function: task.test.function,
                    context,
                    judge: request.judge,
                    timeoutMs: resources.testTimeoutMs,
                    python: resources.python,
                  });
            report.rubrics = outcome.verdicts;
            report.assertions = [{ name: `test ${task.uid}`, passed: outcome.status === 'pass' }];
            return outcome.status === 'pass'
              ? { ...report, outcome: 'success', reward: 1 }
              : { ...report, cause: outcome.message || `test ${task.uid} failed` };
          } catch (err) {
            if (err instanceof BadInputError) throw err;
            return { ...report, outcome: 'infrastructure_error', reward: 0, cause: errorMessage(err) };
          }
        },
        close: stopAll,
      };
      return opened;
    },
  };
}

import { createHash } from 'node:crypto';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ImportedScenario, ImportedTask, NativeTestPattern } from '../../config/thinkingbox-schema.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import type { StateDifference } from '../../core/canonical-state.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../../core/errors.ts';
import type { EpisodeEnvironment, GradeRequest, OpenedEnvironment } from '../../rollout/episode-environment.ts';
import type { Judge, JudgeVerdict } from '../../rollout/judge-client.ts';
import { toolResultText, type ToolResult, type ToolSession, type ToolSpec } from '../../rollout/mcp-tool-session.ts';
import { ungradedReport, type GradeReport } from '../../sandbox/terminal-state-grader.ts';
import type { ThinkingBoxSuite } from './imported-suite.ts';
import { datasetEnvironment } from './dataset-environment.ts';
import { serverLaunchSpec } from './server-launch.ts';
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
  testTimeoutMs: number;
  /** Grade the recognised common test body natively instead of in Python. */
  nativeGrading: boolean;
  toolTimeoutMs?: number;
}

const RESERVED = '__reserved__';

/** A server's effects, as `__reserved__geteffects` returns them (only the fields grading reads are typed). */
export interface ServerEffects {
  result_db_hash?: string;
  golden_db_hash?: string;
  diff?: StateDifference[];
  rubrics_yesno?: string[];
  [key: string]: unknown;
}

/**
 * `.format(init=...)` of Python for the `{init[key]}`/`{init.key}` fields a format_query task uses; `{{`/`}}`
 * escape.
 */
export function formatWithInit(text: string, init: unknown): string {
  return text.replace(/\{\{|\}\}|\{init((?:\[[^\]]*\]|\.[A-Za-z_]\w*)*)\}/g, (whole, access: string | undefined) => {
    if (whole === '{{') return '{';
    if (whole === '}}') return '}';
    let value: unknown = init;
    for (const [, bracket, dot] of (access ?? '').matchAll(/\[([^\]]*)\]|\.(\w+)/g)) {
      const key = bracket ?? dot!;
      value =
        Array.isArray(value) && /^\d+$/.test(key) ? value[Number(key)] : (value as Record<string, unknown>)?.[key];
      if (value === undefined) throw new BadInputError(`format_query: {init${access}} is not in the init result`);
    }
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
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

/** The domain prompt: the scenario's bot_instructions followed by the test's own (the agent prompt is separate). */
export function botInstructions(scenario: ImportedScenario, task: ImportedTask): string {
  return [scenario.bot_instructions.trim(), task.bot_instructions?.trim() ?? ''].filter(Boolean).join('\n\n');
}

/** The reference's system messages: the agent's system instructions, then the domain's (each only when set). */
export function agentSystemMessages(agentPrompt: string, domain: string): string[] {
  return [agentPrompt.trim(), domain].filter(Boolean);
}

/** The native fast path: exactly what the common Python body does, in the same order (so judge calls match). */
export async function gradeNatively(
  pattern: NativeTestPattern,
  effects: Record<string, ServerEffects>,
  response: string,
  judge: Judge | undefined,
): Promise<{ status: 'pass' | 'fail'; message: string; reward?: number; verdicts: JudgeVerdict[] }> {
  const verdicts: JudgeVerdict[] = [];
  for (const server of pattern.servers) {
    const e = effects[server];
    if (!e || typeof e.result_db_hash !== 'string' || typeof e.golden_db_hash !== 'string')
      throw new InfrastructureError(`effects of server '${server}' lack result_db_hash/golden_db_hash`);
    if (e.result_db_hash !== e.golden_db_hash)
      return { status: 'fail', message: `terminal state of '${server}' differs from the golden state`, verdicts };
    if (!pattern.rubrics) continue;
    for (const question of e.rubrics_yesno ?? []) {
      if (!judge) throw new BadInputError(`the test asks the judge (rubric '${question}') but no judge is configured`);
      const v = await judge.ask(question, response);
      verdicts.push(v);
      if (!v.yes) return { status: 'fail', message: `rubric answered no: ${question}`, verdicts };
    }
  }
  return { status: 'pass', message: '', verdicts };
}

function combinedHash(effects: Record<string, ServerEffects>, field: 'result_db_hash' | 'golden_db_hash'): string {
  return createHash('sha256')
    .update(canonicalJson(Object.fromEntries(Object.entries(effects).map(([s, e]) => [s, e[field] ?? null]))))
    .digest('hex');
}

/** A tool as the agent sees it: the server's schema with the scenario's overrides applied. */
function visibleSpec(offered: ToolSpec | undefined, visible: ImportedScenario['tools'][number]): ToolSpec {
  const base = offered ?? { name: visible.name, description: '', inputSchema: { type: 'object', properties: {} } };
  let inputSchema = base.inputSchema;
  if (visible.arg_descriptions) {
    const properties = { ...((inputSchema.properties as Record<string, Record<string, unknown>>) ?? {}) };
    for (const [arg, description] of Object.entries(visible.arg_descriptions))
      properties[arg] = { ...(properties[arg] ?? {}), description };
    inputSchema = { ...inputSchema, properties };
  }
  return { name: visible.name, description: visible.description ?? base.description, inputSchema };
}

/** What a tool call of the episode routes to. */
type Route =
  | { kind: 'server'; server: StartedServer; spec: ToolSpec; endTurn: boolean }
  | { kind: 'direct'; text: string; spec: ToolSpec; endTurn: boolean }
  | { kind: 'builtin'; spec: ToolSpec; endTurn: boolean };

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
    gradeTimeoutMs: resources.testTimeoutMs + 5 * 60_000,
    async open(owner) {
      const dataset = datasetEnvironment(suite.imported.server_packages, suite.dir);
      const names = Object.keys(task.world_state);
      const specs = names.map((name) => {
        const spec = suite.imported.servers[name];
        if (!spec)
          throw new BadInputError(
            `task ${task.uid}: world_state names server '${name}', which servers.yaml does not define`,
          );
        if (spec.transport !== 'stdio')
          throw new BadInputError(
            `task ${task.uid}: server '${name}' is mcp-remote (${spec.url}); the episode backend runs mcp-process ` +
              `servers only (a shared remote server is not a fresh backend per episode)`,
          );
        return serverLaunchSpec(spec, dataset);
      });
      const settled = await Promise.allSettled(names.map((name, i) => resources.servers.acquire(name, specs[i]!)));
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
      const route = new Map<string, Route>();
      const initResult: Record<string, unknown> = {};
      try {
        await Promise.all(
          servers.map(async (s) => {
            const answer = await callReserved(s, 'init', { config: task.world_state[s.name] ?? {} }, toolTimeoutMs);
            const ok =
              typeof answer === 'object' &&
              answer !== null &&
              !Array.isArray(answer) &&
              (Object.keys(answer).length === 0 || (answer as { status?: unknown }).status === 'ok');
            if (!ok)
              throw new InfrastructureError(
                `tool server '${s.name}': __reserved__init did not return {} or {"status": "ok"}: ` +
                  `${JSON.stringify(answer).slice(0, 500)}`,
              );
            const { status: _status, ...rest } = answer as Record<string, unknown>;
            initResult[s.name] = rest;
          }),
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
        for (const b of scenario.builtin_tools)
          route.set(b.name, {
            kind: 'builtin',
            spec: { name: b.name, description: b.description, inputSchema: b.input_schema },
            endTurn: b.is_end_turn,
          });
        for (const visible of scenario.tools) {
          const found = offered.get(visible.name);
          const spec = visibleSpec(found?.spec, visible);
          const endTurn = visible.is_end_turn === true;
          if (visible.direct_response !== undefined) {
            route.set(visible.name, { kind: 'direct', text: visible.direct_response, spec, endTurn });
            continue;
          }
          if (!found)
            throw new BadInputError(
              `scenario ${scenario.name} (${scenario.file}): visible tool '${visible.name}' is not offered by its ` +
                `servers (${names.join(', ')})`,
            );
          route.set(visible.name, { kind: 'server', server: found.server, spec, endTurn });
        }
      } catch (err) {
        await stopAll();
        throw err instanceof BadInputError || err instanceof InfrastructureError
          ? err
          : new InfrastructureError(`tool servers of ${task.uid}: ${errorMessage(err)}`, { cause: err });
      }

      const directResponses: string[] = [];
      const tools: ToolSession = {
        async listTools() {
          return [...route.values()].map((r) => r.spec);
        },
        async callTool(name, args): Promise<ToolResult> {
          const target = route.get(name);
          if (!target) return { text: `Error: function '${name}' does not exist`, isError: true };
          if (target.kind === 'builtin') return { text: '', isError: false, endTurn: target.endTurn };
          if (target.kind === 'direct') {
            directResponses.push(target.text);
            return { text: target.text, isError: false, endTurn: target.endTurn };
          }
          try {
            const result = await target.server.client.callTool({ name, arguments: args }, CallToolResultSchema, {
              timeout: toolTimeoutMs,
            });
            return { text: toolResultText(result), isError: result.isError === true, endTurn: target.endTurn };
          } catch (err) {
            throw new InfrastructureError(`tool server '${target.server.name}': ${name} failed: ${errorMessage(err)}`, {
              cause: err,
            });
          }
        },
        async close() {},
      };

      const format = (text: string) => (task.format_query ? formatWithInit(text, initResult) : text);
      const opened: OpenedEnvironment = {
        tools,
        ...(task.format_query
          ? {
              formatted: {
                query: format(task.query),
                systemMessages: agentSystemMessages(scenario.agent_prompt, format(botInstructions(scenario, task))),
              },
            }
          : {}),
        async grade(request: GradeRequest): Promise<GradeReport> {
          const report = ungradedReport();
          try {
            const effects: Record<string, ServerEffects> = {};
            for (const server of servers)
              effects[server.name] = (await callReserved(server, 'geteffects', {}, toolTimeoutMs)) as ServerEffects;
            report.resultHash = combinedHash(effects, 'result_db_hash');
            report.goldenHash = combinedHash(effects, 'golden_db_hash');
            report.stateMatches = Object.values(effects).every((e) => e.result_db_hash === e.golden_db_hash);
            report.diff = Object.entries(effects).flatMap(([s, e]) =>
              Array.isArray(e.diff) ? e.diff.map((d) => ({ ...d, path: `${s}:${d.path}` })) : [],
            );
            const context: TestContext = {
              effects,
              response: request.lastAssistantText,
              tool_calls: request.toolCalls.map((c) => ({
                tool_call: { name: c.name, arguments: c.arguments },
                tool_response: c.result,
              })),
              messages: request.messages ?? [],
              init_result: initResult,
              session_id: owner,
              metadata: { scenario: scenario.name, test_case_file: task.test.file, test_case_name: task.test.function },
              tool_direct_responses: directResponses,
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
                    python: dataset.python,
                  });
            report.rubrics = outcome.verdicts;
            report.assertions = [{ name: `test ${task.uid}`, passed: outcome.status === 'pass' }];
            return outcome.status === 'pass'
              ? { ...report, outcome: 'success', reward: outcome.reward ?? 1 }
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

import { createHash } from 'node:crypto';
import type { ImportedScenario, ImportedTask } from '../../config/thinkingbox-schema.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import { BadInputError, errorMessage } from '../../core/errors.ts';
import { interpretCompletion, interpretNativeMessage, type NativeToolCall } from '../../core/interpret/index.ts';
import type { GradeRequest, ToolCallMade } from '../../rollout/episode-environment.ts';
import { ungradedReport, type GradeReport } from '../../sandbox/terminal-state-grader.ts';
import { defaultJudgeLimits, limitedJudge, type JudgeLimits } from './judge-limits.ts';
import { gradeNatively } from './native-grading.ts';
import { serverEffects, type ServerEffects } from './reserved-tools.ts';
import type { StartedServer } from './stdio-server-pool.ts';
import {
  runTestCase,
  type ReferenceMessage,
  type ReferenceToolCall,
  type TestCaseResult,
  type TestContext,
} from './test-case-runner.ts';
import { TestCodeError } from './test-code-error.ts';

/**
 * Grading of a ThinkingBox episode: the terminal state from each server's `__reserved__geteffects`, then the
 * task's test code on it (or the native fast path for the common hash-and-rubrics body). A failing test is an
 * agent failure; a test or server that cannot run is an infrastructure error; a test whose own code raises the
 * same exception at the same place in two gradings is a task error; a test that needs a judge when none is
 * configured is bad input.
 */

/** What grading needs of an open episode. */
export interface EpisodeGrading {
  task: ImportedTask;
  scenario: ImportedScenario;
  servers: StartedServer[];
  /** What `__reserved__init` returned, by server (`x.init_result`). */
  initResult: Record<string, unknown>;
  /** The direct responses the agent got, in order (`x.tool_direct_responses`). */
  directResponses: string[];
  /** The episode's owner (`x.session_id`). */
  owner: string;
  /** The dataset environment's interpreter, for the test code. */
  python: string;
  /** Grade the recognised common test body natively instead of in Python. */
  nativeGrading: boolean;
  testTimeoutMs: number;
  toolTimeoutMs: number;
  /** What the test may ask of the judge (third review, finding 14); default: episode.thinkingbox's defaults. */
  judgeLimits?: JudgeLimits;
}

function combinedHash(effects: Record<string, ServerEffects>, field: 'result_db_hash' | 'golden_db_hash'): string {
  return createHash('sha256')
    .update(canonicalJson(Object.fromEntries(Object.entries(effects).map(([s, e]) => [s, e[field] ?? null]))))
    .digest('hex');
}

/** The report's terminal-state fields: hashes over all servers, and each server's diff prefixed by its name. */
function recordTerminalState(report: GradeReport, effects: Record<string, ServerEffects>): void {
  report.resultHash = combinedHash(effects, 'result_db_hash');
  report.goldenHash = combinedHash(effects, 'golden_db_hash');
  report.stateMatches = Object.values(effects).every((e) => e.result_db_hash === e.golden_db_hash);
  report.diff = Object.entries(effects).flatMap(([s, e]) =>
    Array.isArray(e.diff) ? e.diff.map((d) => ({ ...d, path: `${s}:${d.path}` })) : [],
  );
}

/** An assistant or tool message of the episode's chat (the OpenAI chat shape the policy saw). */
interface ChatLike {
  role?: unknown;
  content?: unknown;
  tool_calls?: NativeToolCall[];
  tool_call_id?: unknown;
}

const text = (role: 'system' | 'user' | 'assistant', content: string, tag?: string): ReferenceMessage => ({
  T: 'Text',
  role,
  content,
  metadata: tag ? { tag } : {},
});

/**
 * The conversation in the reference's typed form (`x.messages`): system and user texts; per assistant completion
 * its reasoning (tag think), its visible text (tag text) and its tool calls (one ParallelToolCall); each tool
 * result as a ToolResponse paired with its call's id; a direct response (an assistant message after the results
 * that is the next of `directResponses`) as tag direct. Calls without an id in the chat get `call_<n>`.
 */
export function referenceMessages(chat: unknown[], directResponses: readonly string[]): ReferenceMessage[] {
  const out: ReferenceMessage[] = [];
  let pending: ReferenceToolCall[] = [];
  let direct = 0;
  let calls = 0;
  for (const raw of chat) {
    const m = (raw ?? {}) as ChatLike;
    const content = typeof m.content === 'string' ? m.content : '';
    const previous = out.at(-1);
    if (m.role === 'system' || m.role === 'user') out.push(text(m.role, content));
    else if (m.role === 'tool') {
      const id = typeof m.tool_call_id === 'string' ? m.tool_call_id : undefined;
      const call = (id && pending.find((c) => c.id === id)) || pending[0];
      pending = pending.filter((c) => c !== call);
      out.push({
        T: 'ToolResponse',
        name: call?.name ?? '',
        content,
        id: id ?? call?.id ?? `call_${++calls}`,
        metadata: {},
      });
    } else if (m.role === 'assistant') {
      const afterResults =
        previous?.T === 'ToolResponse' || (previous?.T === 'Text' && previous.metadata.tag === 'direct');
      if (afterResults && !m.tool_calls?.length && content === directResponses[direct]) {
        direct += 1;
        out.push(text('assistant', content, 'direct'));
        continue;
      }
      const said = m.tool_calls?.length
        ? interpretNativeMessage({ content, tool_calls: m.tool_calls }, [])
        : interpretCompletion(content, []);
      if (said.reasoning) out.push(text('assistant', said.reasoning, 'think'));
      if (said.text) out.push(text('assistant', said.text, 'text'));
      pending = said.toolCalls.map((c) => ({
        T: 'ToolCall',
        name: c.name,
        arguments: c.arguments,
        id: m.tool_calls?.[c.index]?.id ?? `call_${++calls}`,
        metadata: c.parseError !== undefined ? { error: c.parseError } : {},
      }));
      if (pending.length) out.push({ T: 'ParallelToolCall', tool_calls: pending, metadata: {} });
    }
  }
  return out;
}

/**
 * `x.tool_calls`: every call the agent made with its response, typed. A call takes the id of the same-named call
 * in `messages`, matched from the end (the agent's calls are the conversation's last ones; a history's come
 * first); one not found there gets `call_agent_<i>`.
 */
export function referenceToolCalls(
  calls: readonly ToolCallMade[],
  messages: readonly ReferenceMessage[],
): TestContext['tool_calls'] {
  const slots = messages.flatMap((m) => (m.T === 'ParallelToolCall' ? m.tool_calls : []));
  let slot = slots.length - 1;
  const ids: string[] = [];
  for (let i = calls.length - 1; i >= 0; i--) {
    let found = slot;
    while (found >= 0 && slots[found]!.name !== calls[i]!.name) found--;
    if (found >= 0) slot = found - 1;
    ids[i] = found >= 0 ? slots[found]!.id : `call_agent_${i + 1}`;
  }
  return calls.map((c, i) => ({
    tool_call: { T: 'ToolCall', name: c.name, arguments: c.arguments, id: ids[i]!, metadata: {} },
    tool_response: { T: 'ToolResponse', name: c.name, content: c.result, id: ids[i]!, metadata: {} },
  }));
}

/** The `x` the test function sees. */
function testContext(
  episode: EpisodeGrading,
  effects: Record<string, ServerEffects>,
  request: GradeRequest,
): TestContext {
  const { task, scenario } = episode;
  const messages = referenceMessages(request.messages ?? [], episode.directResponses);
  return {
    effects,
    response: request.lastAssistantText,
    tool_calls: referenceToolCalls(request.toolCalls, messages),
    messages,
    init_result: episode.initResult,
    session_id: episode.owner,
    metadata: { scenario: scenario.name, test_case_file: task.test.file, test_case_name: task.test.function },
    tool_direct_responses: episode.directResponses,
  };
}

function runTest(
  episode: EpisodeGrading,
  effects: Record<string, ServerEffects>,
  request: GradeRequest,
): Promise<TestCaseResult> {
  const { task } = episode;
  const judgeLimits = episode.judgeLimits ?? defaultJudgeLimits();
  if (episode.nativeGrading && task.test.native) {
    // The rubric questions come from the servers' effects: the same caps as for test code apply.
    const judge = request.judge && limitedJudge(request.judge, judgeLimits, `test of ${task.uid}`);
    return gradeNatively(task.test.native, effects, request.lastAssistantText, judge);
  }
  return runTestCase({
    file: task.test.file,
    function: task.test.function,
    context: testContext(episode, effects, request),
    judge: request.judge,
    // The judge type test code's `judge` gets: the mode the native path's `ask` uses too.
    ...(request.judge ? { judgeType: request.judge.mode } : {}),
    judgeLimits,
    timeoutMs: episode.testTimeoutMs,
    python: episode.python,
  });
}

/**
 * The test's result; when its own code raises, it runs once more on the same effects, and the same exception at
 * the same place again is returned as the TestCodeError (a task error). A different second answer stands as it is.
 */
async function runTestGradedAgainOnce(
  episode: EpisodeGrading,
  effects: Record<string, ServerEffects>,
  request: GradeRequest,
): Promise<TestCaseResult | TestCodeError> {
  try {
    return await runTest(episode, effects, request);
  } catch (first) {
    if (!(first instanceof TestCodeError)) throw first;
    try {
      return await runTest(episode, effects, request);
    } catch (second) {
      if (second instanceof TestCodeError && second.signature === first.signature) return second;
      throw second;
    }
  }
}

export async function gradeEpisode(episode: EpisodeGrading, request: GradeRequest): Promise<GradeReport> {
  const { task } = episode;
  const report = ungradedReport();
  try {
    const effects = await serverEffects(episode.servers, episode.toolTimeoutMs);
    recordTerminalState(report, effects);
    const outcome = await runTestGradedAgainOnce(episode, effects, request);
    if (outcome instanceof TestCodeError) {
      const { file, line } = outcome.place;
      const taskError = { file, line, exception: outcome.exception };
      // The place last, so a long message is cut here and not where result lines cut the cause (300 characters).
      const shown = outcome.exception.length > 100 ? `${outcome.exception.slice(0, 99)}…` : outcome.exception;
      const cause = `task error: the test of ${task.uid} raised ${shown} at ${file}:${line} twice`;
      return { ...report, outcome: 'task_error', reward: 0, cause, taskError };
    }
    report.rubrics = outcome.verdicts;
    report.assertions = [{ name: `test ${task.uid}`, passed: outcome.status === 'pass' }];
    return outcome.status === 'pass'
      ? { ...report, outcome: 'success', reward: outcome.reward ?? 1 }
      : { ...report, cause: outcome.message || `test ${task.uid} failed` };
  } catch (err) {
    if (err instanceof BadInputError) throw err;
    return { ...report, outcome: 'infrastructure_error', reward: 0, cause: errorMessage(err) };
  }
}

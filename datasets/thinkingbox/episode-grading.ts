import { createHash } from 'node:crypto';
import type { ImportedScenario, ImportedTask } from '../../config/thinkingbox-schema.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import { BadInputError, errorMessage } from '../../core/errors.ts';
import type { GradeRequest } from '../../rollout/episode-environment.ts';
import { ungradedReport, type GradeReport } from '../../sandbox/terminal-state-grader.ts';
import { gradeNatively } from './native-grading.ts';
import { serverEffects, type ServerEffects } from './reserved-tools.ts';
import type { StartedServer } from './stdio-server-pool.ts';
import { runTestCase, type TestCaseResult, type TestContext } from './test-case-runner.ts';

/**
 * Grading of a ThinkingBox episode: the terminal state from each server's `__reserved__geteffects`, then the
 * task's test code on it (or the native fast path for the common hash-and-rubrics body). A failing test is an
 * agent failure; a test or server that cannot run is an infrastructure error; a test that needs a judge when
 * none is configured is bad input.
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

/** The `x` the test function sees. */
function testContext(
  episode: EpisodeGrading,
  effects: Record<string, ServerEffects>,
  request: GradeRequest,
): TestContext {
  const { task, scenario } = episode;
  return {
    effects,
    response: request.lastAssistantText,
    tool_calls: request.toolCalls.map((c) => ({
      tool_call: { name: c.name, arguments: c.arguments },
      tool_response: c.result,
    })),
    messages: request.messages ?? [],
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
  if (episode.nativeGrading && task.test.native)
    return gradeNatively(task.test.native, effects, request.lastAssistantText, request.judge);
  return runTestCase({
    file: task.test.file,
    function: task.test.function,
    context: testContext(episode, effects, request),
    judge: request.judge,
    timeoutMs: episode.testTimeoutMs,
    python: episode.python,
  });
}

export async function gradeEpisode(episode: EpisodeGrading, request: GradeRequest): Promise<GradeReport> {
  const { task } = episode;
  const report = ungradedReport();
  try {
    const effects = await serverEffects(episode.servers, episode.toolTimeoutMs);
    recordTerminalState(report, effects);
    const outcome = await runTest(episode, effects, request);
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

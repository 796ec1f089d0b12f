import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { thinkingboxSettingsSchema } from '../../config/episode-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { InfrastructureError } from '../../core/errors.ts';
import { datasetPython } from '../../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox } from '../../datasets/thinkingbox/dataset-sandbox.ts';
import { gradeEpisode, type EpisodeGrading } from '../../datasets/thinkingbox/episode-grading.ts';
import type { StartedServer, StdioServerPool } from '../../datasets/thinkingbox/stdio-server-pool.ts';
import { runTestCase, type TestContext } from '../../datasets/thinkingbox/test-case-runner.ts';
import { createJudge } from '../../rollout/judge-client.ts';
import { thinkingboxResources } from '../../rollout/thinkingbox-resources.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * Third review, finding 14: test code (a dataset's, run by thinkingbox/tbt_thinkingbox/run_test_case.py) asks the
 * episode runner for judge completions over the grading pipe, and the runner made each call on the operator's key
 * with the test's own settings, as many and as many at once as the test liked. These run test code of our own
 * (test/fixtures/judge-limits) in the real sandbox and runner against a judge double speaking OpenAI's protocol.
 */

const file = path.join(repoRoot, 'test', 'fixtures', 'judge-limits', 'judge_flood_tests.py');
const defaults = thinkingboxSettingsSchema.parse(undefined) as Record<string, unknown>;
const context: TestContext = {
  effects: {},
  response: 'Thank you, your refund is on its way.',
  tool_calls: [],
  messages: [],
  init_result: {},
  session_id: 'judge-limits-test',
  metadata: {},
  tool_direct_responses: [],
};
let sandbox: DatasetSandbox;
const doubles: OpenAIWireProtocolDouble[] = [];

before(() => {
  sandbox = new DatasetSandbox({ log: () => undefined });
});
after(async () => {
  await Promise.all(doubles.map((d) => d.stop()));
});

/** A judge double that answers Yes after `delayMs` and counts the requests in flight at once. */
async function judgeDouble(delayMs = 20) {
  const stats = { inFlight: 0, maxInFlight: 0 };
  const double = new OpenAIWireProtocolDouble(() => {
    stats.inFlight += 1;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    setTimeout(() => (stats.inFlight -= 1), delayMs);
    return { content: 'Yes', delayMs };
  });
  doubles.push(double);
  const judge = createJudge({ baseUrl: await double.start(), model: 'judge-double', timeoutMs: 10_000 });
  return { double, stats, judge };
}

const outcomeOf = (p: Promise<unknown>) =>
  p.then(
    (result) => ({ result, error: undefined as Error | undefined }),
    (error: Error) => ({ result: undefined, error }),
  );

test('third review, finding 14: maxima for judge calls per test and completion tokens, with defaults', () => {
  assert.equal(defaults.judge_calls_per_test, 32);
  assert.equal(defaults.judge_max_completion_tokens, 1024);
  const parse = (v: Record<string, number>) => thinkingboxSettingsSchema.safeParse(v);
  assert.equal(parse({ judge_calls_per_test: 1000, judge_max_completion_tokens: 65_536 }).success, true);
  for (const [field, value] of [
    ['judge_calls_per_test', 1001],
    ['judge_calls_per_test', 0],
    ['judge_max_completion_tokens', 65_537],
    ['judge_max_completion_tokens', 0],
  ] as const) {
    const result = parse({ [field]: value });
    assert.equal(result.success, false, `${field}=${value} was accepted`);
    assert.deepEqual(result.error!.issues[0]!.path, [field]);
  }
});

test('third review, finding 14: 50 threaded judge calls asking 100,000 tokens: 32 reach it, clamped', async () => {
  const { double, stats, judge } = await judgeDouble();
  const logged: string[] = [];
  const { result, error } = await outcomeOf(
    runTestCase({
      file,
      function: 'test_threads',
      context,
      judge,
      timeoutMs: 60_000,
      python: datasetPython(),
      sandbox,
      log: (line: string) => logged.push(line),
    } as Parameters<typeof runTestCase>[0]),
  );
  const tokens = [...new Set(double.requests.map((r) => r.max_completion_tokens))];
  console.log(
    `# test_threads: ${double.requests.length} of 50 judge calls reached the judge, max_completion_tokens ` +
      `${tokens.join(',')}, at most ${stats.maxInFlight} in flight; ` +
      `outcome: ${error?.message ?? JSON.stringify(result)}`,
  );
  assert.equal(double.requests.length, 32, 'calls that reached the judge');
  for (const r of double.requests) {
    assert.equal(r.max_completion_tokens, 1024);
    assert.equal(r.max_tokens, undefined);
    assert.ok(r.temperature! >= 0 && r.temperature! <= 2, `temperature ${r.temperature}`);
  }
  // The test swallowed its refusals and passed: the grade is still not the test's, it is an infrastructure error.
  assert.ok(error instanceof InfrastructureError, `outcome: ${JSON.stringify(result)}`);
  assert.match(
    error.message,
    new RegExp(
      String.raw`test .*judge_flood_tests\.py:test_threads asked the judge more than 32 times, ` +
        String.raw`the cap per test case \(episode\.thinkingbox\.judge_calls_per_test\)`,
    ),
  );
  assert.equal(logged.filter((l) => /more than 32 times/.test(l)).length, 1, logged.join('\n'));
  assert.ok(
    logged.some((l) => /asked max_completion_tokens 100000; sent 1024/.test(l)),
    logged.join('\n'),
  );
});

test('third review, finding 14: judge requests written straight to the pipe go one at a time', async () => {
  const { double, stats, judge } = await judgeDouble(30);
  const { error } = await outcomeOf(
    runTestCase({
      file,
      function: 'test_raw_pipe',
      context,
      judge,
      timeoutMs: 60_000,
      python: datasetPython(),
      sandbox,
      log: () => undefined,
    } as Parameters<typeof runTestCase>[0]),
  );
  console.log(
    `# test_raw_pipe: ${double.requests.length} of 50 judge calls reached the judge, ` +
      `at most ${stats.maxInFlight} in flight`,
  );
  assert.equal(stats.maxInFlight, 1, 'judge calls in flight at once');
  assert.equal(double.requests.length, 32);
  assert.ok(error instanceof InfrastructureError);
  assert.match(error.message, /more than 32 times/);
});

test("third review, finding 14: the operator's maxima apply in grading, native path too", async () => {
  const settings = thinkingboxSettingsSchema.parse({ judge_calls_per_test: 3, judge_max_completion_tokens: 64 });
  const resources = thinkingboxResources(settings, {} as StdioServerPool);
  const limits = (resources as unknown as { judgeLimits: unknown }).judgeLimits;
  assert.deepEqual(limits, { callsPerTest: 3, maxCompletionTokens: 64 });
  const rubrics = Array.from({ length: 10 }, (_, i) => `Rubric ${i}: is the answer polite?`);
  const effects = { result_db_hash: 'h', golden_db_hash: 'h', diff: [], rubrics_yesno: rubrics };
  const server = {
    name: 'kb',
    client: { callTool: async () => ({ content: [{ type: 'text', text: JSON.stringify(effects) }] }) },
    stderrTail: () => '',
  } as unknown as StartedServer;
  const grade = async (fn: string, native: boolean) => {
    const { double, judge } = await judgeDouble(1);
    const episode = {
      task: {
        uid: `limits-${fn}`,
        test: {
          file,
          function: fn,
          native: native ? { kind: 'hash_and_rubrics', servers: ['kb'], rubrics: true } : null,
        },
      } as EpisodeGrading['task'],
      scenario: { name: 'limits' } as EpisodeGrading['scenario'],
      servers: [server],
      initResult: {},
      directResponses: [],
      owner: 'judge-limits-test',
      python: datasetPython(),
      nativeGrading: native,
      testTimeoutMs: 60_000,
      toolTimeoutMs: 10_000,
      judgeLimits: limits,
    } as EpisodeGrading;
    const report = await gradeEpisode(episode, { lastAssistantText: 'Thanks!', toolCalls: [], judge });
    return { report, requests: double.requests };
  };
  for (const [fn, native] of [
    ['test_threads', false],
    ['native rubrics', true],
  ] as const) {
    const { report, requests } = await grade(fn, native);
    assert.equal(report.outcome, 'infrastructure_error', `${fn}: ${report.outcome} ${report.cause}`);
    assert.match(report.cause ?? '', /more than 3 times/);
    assert.equal(requests.length, 3, fn);
    assert.deepEqual([...new Set(requests.map((r) => r.max_completion_tokens))], [64], fn);
  }
  // An ordinary test stays within the caps and is graded as before.
  const { report, requests } = await grade('test_one_rubric', false);
  assert.equal(report.outcome, 'success', report.cause);
  assert.equal(requests.length, 1);
});

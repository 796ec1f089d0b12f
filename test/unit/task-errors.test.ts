import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import { datasetPython } from '../../datasets/thinkingbox/dataset-python.ts';
import { gradeEpisode, type EpisodeGrading } from '../../datasets/thinkingbox/episode-grading.ts';
import type { StartedServer } from '../../datasets/thinkingbox/stdio-server-pool.ts';
import { createJudge, type Judge } from '../../rollout/judge-client.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * Task errors (issue 40): a test whose own code raises (not an assertion) is graded again once; the same
 * exception at the same place twice is a `task_error` naming the test's file, line and exception, not an
 * infrastructure error that re-runs for an hour. A different second answer stands. Our own test code
 * (test/fixtures/task-errors) runs in the real runner and sandbox; a judge double scripts which exception it raises.
 */

const file = path.join(repoRoot, 'test', 'fixtures', 'task-errors', 'task_error_tests.py');
const doubles: OpenAIWireProtocolDouble[] = [];
after(async () => {
  await Promise.all(doubles.map((d) => d.stop()));
});

const server = {
  name: 'kb',
  client: { callTool: async () => ({ content: [{ type: 'text', text: '{}' }] }) },
  stderrTail: () => '',
} as unknown as StartedServer;

/** A judge double answering `answers` in order ('none' after them), and how many calls it got. */
async function judgeAnswering(answers: string[]): Promise<{ judge: Judge; calls: () => number }> {
  const double = new OpenAIWireProtocolDouble((_, i) => answers[i] ?? 'none');
  doubles.push(double);
  const judge = createJudge({ baseUrl: await double.start(), model: 'judge-double', timeoutMs: 10_000 });
  return { judge, calls: () => double.requests.length };
}

/** Grades `fn` of the fixture file with `judge`. */
function grade(fn: string, judge?: Judge) {
  const episode = {
    task: { uid: `task-errors:${fn}`, test: { file, function: fn, native: null } },
    scenario: { name: 'task-errors' },
    servers: [server],
    initResult: {},
    directResponses: [],
    owner: 'task-errors-test',
    python: datasetPython(),
    nativeGrading: false,
    testTimeoutMs: 60_000,
    toolTimeoutMs: 10_000,
  } as unknown as EpisodeGrading;
  return gradeEpisode(episode, { lastAssistantText: 'Done.', toolCalls: [], judge });
}

const fixtureLines = fs.readFileSync(file, 'utf8').split('\n');
/** The 1-based line of the fixture file that holds `text`. */
const lineOf = (text: string) => fixtureLines.findIndex((l) => l.includes(text)) + 1;

test('a test that raises the same exception at the same line twice is a task error naming file and line', async () => {
  const report = await grade('test_last_tool_call');
  assert.equal(report.outcome, 'task_error', report.cause);
  assert.equal(report.reward, 0);
  assert.deepEqual(report.taskError, {
    file,
    line: lineOf('tool_call_names[-1]'),
    exception: 'IndexError: list index out of range',
  });
  assert.match(report.cause ?? '', /raised IndexError: list index out of range at .*task_error_tests\.py:\d+ twice/);
});

test('the same exception raised twice through the judge: a task error after exactly two gradings', async () => {
  const { judge, calls } = await judgeAnswering(['key', 'key', 'key']);
  const report = await grade('test_raises_as_the_judge_says', judge);
  assert.equal(report.outcome, 'task_error', report.cause);
  assert.equal(report.taskError?.line, lineOf('raise KeyError'));
  assert.equal(calls(), 2, 'graded twice, not more');
});

test('two different exceptions stay an infrastructure error (re-run as before)', async () => {
  const report = await grade('test_raises_as_the_judge_says', (await judgeAnswering(['key', 'index'])).judge);
  assert.equal(report.outcome, 'infrastructure_error', report.cause);
  assert.equal(report.taskError, undefined);
  assert.match(report.cause ?? '', /IndexError/);
});

test('a test that raises once and then passes is graded by its second answer', async () => {
  const { judge, calls } = await judgeAnswering(['index', 'neither']);
  const report = await grade('test_raises_as_the_judge_says', judge);
  assert.equal(report.outcome, 'success', report.cause);
  assert.equal(calls(), 2);
});

test('a judge outage is never a task error, however often it repeats', async () => {
  const double = new OpenAIWireProtocolDouble(() => ({ status: 503 }));
  doubles.push(double);
  const judge = createJudge({ baseUrl: await double.start(), model: 'judge-double', timeoutMs: 5_000 });
  const report = await grade('test_raises_as_the_judge_says', judge);
  assert.equal(report.outcome, 'infrastructure_error', report.cause);
});

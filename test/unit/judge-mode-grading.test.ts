import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { episodeConfigSchema, type JudgeMode } from '../../config/episode-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { datasetPython } from '../../datasets/thinkingbox/dataset-python.ts';
import { gradeEpisode, type EpisodeGrading } from '../../datasets/thinkingbox/episode-grading.ts';
import type { StartedServer } from '../../datasets/thinkingbox/stdio-server-pool.ts';
import { episodeDependencies } from '../../rollout/episode-setup.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * The judge mode from the episode config to the judge model: the episode's judge (episodeDependencies) asks in the
 * config's `judge_mode`, and the test runner's request hands it to test code as its `judge`'s judge type. So a
 * rubric reaches the judge with the reference's prompt of that mode, through the Python test body (real runner and
 * sandbox) and through the native path alike, and the mode decides the grade: a bare "Yes" passes the legacy judge
 * and fails the motivation judge, which reads only JSON.
 */

const file = path.join(repoRoot, 'test', 'fixtures', 'judge-mode', 'judge_mode_tests.py');
const prompts = (
  JSON.parse(
    fs.readFileSync(path.join(repoRoot, 'thinkingbox', 'tests', 'fixtures', 'reference_judge_prompts.json'), 'utf8'),
  ) as { prompts: Record<string, string> }
).prompts;
const systemPrompt = { legacy: prompts.SYSTEM_TEXT_YESNO, motivation: prompts.SYSTEM_TEXT_YESNO_MOTIVATION };

let answer = 'Yes';
const double = new OpenAIWireProtocolDouble(() => answer);
const judgeUrl = double.start();
after(() => double.stop());

const question = 'Are two seats booked?';
const server = {
  name: 'kb',
  client: {
    callTool: async () => ({
      content: [
        { type: 'text', text: JSON.stringify({ result_db_hash: 'h', golden_db_hash: 'h', rubrics_yesno: [question] }) },
      ],
    }),
  },
  stderrTail: () => '',
} as unknown as StartedServer;

/** Grades the rubric test with the judge an episode of `judge_mode` gets; the native path or the Python body. */
async function grade(mode: JudgeMode | undefined, native: boolean) {
  const config = episodeConfigSchema.parse({
    policy: { base_url: 'http://policy.test/v1', model: 'policy' },
    judge: { base_url: await judgeUrl, model: 'judge-double', timeout_ms: 10_000 },
    ...(mode ? { judge_mode: mode } : {}),
  });
  const { judge } = episodeDependencies(config, {} as never, { user_replies: [] } as never);
  const episode = {
    task: {
      uid: 'judge-mode:test_rubrics',
      test: { file, function: 'test_rubrics', native: { kind: 'hash_and_rubrics', servers: ['kb'], rubrics: true } },
    },
    scenario: { name: 'judge-mode' },
    servers: [server],
    initResult: {},
    directResponses: [],
    owner: 'judge-mode-test',
    python: datasetPython(),
    nativeGrading: native,
    testTimeoutMs: 60_000,
    toolTimeoutMs: 10_000,
  } as unknown as EpisodeGrading;
  const asked = double.requests.length;
  const report = await gradeEpisode(episode, { lastAssistantText: 'Two seats booked.', toolCalls: [], judge });
  assert.equal(double.requests.length, asked + 1, 'one judge call');
  return { report, request: double.requests.at(-1)! };
}

for (const native of [false, true]) {
  const path = native ? 'native path' : 'Python test body';
  for (const mode of [undefined, 'legacy', 'motivation'] as const) {
    test(`${path}, judge_mode ${mode ?? 'unset'}: the rubric is asked with the reference's prompt`, async () => {
      const asked = mode ?? 'legacy';
      answer = asked === 'motivation' ? '{"motivation": "Both seats are booked.", "answer": "Yes"}' : 'Yes';
      const { report, request } = await grade(mode, native);
      assert.equal(report.outcome, 'success', report.cause);
      assert.equal(request.messages[0]?.content, systemPrompt[asked]);
      assert.equal(request.messages[1]?.content, `<message>\nTwo seats booked.\n</message>\n${question}`);
      assert.equal(request.max_completion_tokens, asked === 'motivation' ? 512 : 128);
      assert.deepEqual(
        report.rubrics.map((r) => [r.question, r.yes]),
        [[question, true]],
      );
    });
  }
  test(`${path}: a bare "Yes" passes the legacy judge and fails the motivation judge`, async () => {
    answer = 'Yes';
    assert.equal((await grade('legacy', native)).report.outcome, 'success');
    const motivated = (await grade('motivation', native)).report;
    assert.equal(motivated.outcome, 'agent_failure', motivated.cause);
    assert.deepEqual(
      motivated.rubrics.map((r) => [r.answer, r.yes]),
      [['Yes', false]],
    );
  });
}

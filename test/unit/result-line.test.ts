import assert from 'node:assert/strict';
import { test } from 'node:test';
import { referenceFinishReason, resultLine } from '../../rollout/episode-result-line.ts';

const usage = (input: number, output: number, cached: number) => ({ calls: 1, input, output, cached });

test("a result line carries the reference's shape beside our own fields", () => {
  const record = {
    outcome: 'success' as const,
    finishReason: 'end_turn' as const,
    reward: 1,
    usage: { policy: usage(1200, 300, 200), user: usage(0, 0, 0), judge: usage(50, 2, 0) },
  };
  const line = resultLine('adhoc:x#0', 'sandbox_retail_group1.py:test_a', 2, 'retail', record, 'sandbox_retail');
  assert.equal(line.success, true);
  assert.deepEqual(line.test_result, { result: true, reward: 1, is_system_error: false });
  assert.equal(line.is_system_error, false);
  assert.deepEqual(line.usage, [
    { input_tokens: 1200, output_tokens: 300, input_tokens_details: { cached_tokens: 200 } },
  ]);
  assert.deepEqual(line.metadata, {
    scenario: 'sandbox_retail',
    test_case_file: 'sandbox_retail_group1.py',
    test_case_name: 'test_a',
    repetition: 2,
    finish_reason: 'end_turn_tool',
  });
  const failed = resultLine('i', 'a.py:t', 0, 'd', { ...record, outcome: 'infrastructure_error', reward: 0 });
  assert.equal(failed.test_result, null, 'a system error has no test result');
  assert.equal(failed.is_system_error, true);
});

test("finish reasons in the reference's names", () => {
  assert.deepEqual(
    [
      'done',
      'end_turn',
      'single_turn',
      'user_turn_limit',
      'agent_turn_limit',
      'token_budget',
      'wall_clock_timeout',
    ].map(referenceFinishReason),
    ['done', 'end_turn_tool', 'no_user_llm', 'user_limit', 'agent_limit', 'agent_error', 'agent_error'],
  );
});

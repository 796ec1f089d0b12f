import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { datasetPython } from '../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';
import { referenceMessages, referenceToolCalls } from '../datasets/thinkingbox/episode-grading.ts';
import { runTestCase, type TestContext } from '../datasets/thinkingbox/test-case-runner.ts';
import { judgeFrom } from '../rollout/judge-client.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * What the episode hands a ThinkingBox test, in the reference framework's typed form (`x.messages`,
 * `x.tool_calls` with ids), and what comes back from it: the test's own yes/no verdicts and its reward
 * (docs/thinkingbox-test-api.md lists the API items and their tests).
 */

const toolCall = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

test('referenceMessages types a text-mode episode as the reference conversation', () => {
  const chat = [
    { role: 'system', content: 'policy' },
    { role: 'user', content: 'Cancel my booking' },
    { role: 'assistant', content: `<think>look it up</think>Checking.${toolCall('get_booking', { id: 'B1' })}` },
    { role: 'tool', content: '{"status": "active"}' },
    { role: 'assistant', content: 'Your booking B1 is cancelled.' },
  ];
  assert.deepEqual(referenceMessages(chat, []), [
    { T: 'Text', role: 'system', content: 'policy', metadata: {} },
    { T: 'Text', role: 'user', content: 'Cancel my booking', metadata: {} },
    { T: 'Text', role: 'assistant', content: 'look it up', metadata: { tag: 'think' } },
    { T: 'Text', role: 'assistant', content: 'Checking.', metadata: { tag: 'text' } },
    {
      T: 'ParallelToolCall',
      tool_calls: [{ T: 'ToolCall', name: 'get_booking', arguments: { id: 'B1' }, id: 'call_1', metadata: {} }],
      metadata: {},
    },
    { T: 'ToolResponse', name: 'get_booking', content: '{"status": "active"}', id: 'call_1', metadata: {} },
    { T: 'Text', role: 'assistant', content: 'Your booking B1 is cancelled.', metadata: { tag: 'text' } },
  ]);
});

test('referenceMessages pairs native calls with their results by id and tags direct responses', () => {
  const native = (id: string, name: string) => ({ id, type: 'function', function: { name, arguments: '{}' } });
  const chat = [
    { role: 'assistant', content: '', tool_calls: [native('c_a', 'a'), native('c_b', 'b')] },
    { role: 'tool', content: 'B', tool_call_id: 'c_b' },
    { role: 'tool', content: 'A', tool_call_id: 'c_a' },
    { role: 'assistant', content: 'Ticket 7 is open.' },
    { role: 'assistant', content: 'Ticket 7 is open.' },
  ];
  const messages = referenceMessages(chat, ['Ticket 7 is open.']);
  assert.deepEqual(
    messages.slice(1).map((m) => (m.T === 'ToolResponse' ? [m.name, m.id] : m.T === 'Text' ? m.metadata.tag : m.T)),
    [['b', 'c_b'], ['a', 'c_a'], 'direct', 'text'],
  );
});

test('referenceToolCalls gives each agent call the id of its call in the conversation', () => {
  const history = {
    role: 'assistant',
    content: '',
    tool_calls: [{ id: 'h1', function: { name: 'get', arguments: '{}' } }],
  };
  const chat = [
    history,
    { role: 'tool', content: 'old', tool_call_id: 'h1' },
    { role: 'assistant', content: toolCall('get', {}) },
    { role: 'tool', content: 'new' },
    { role: 'assistant', content: toolCall('transfer_to_human_agents', { summary: 's' }) },
  ];
  const made = [
    { name: 'get', arguments: {}, result: 'new', isError: false },
    { name: 'transfer_to_human_agents', arguments: { summary: 's' }, result: '', isError: false },
  ];
  const calls = referenceToolCalls(made, referenceMessages(chat, []));
  assert.deepEqual(
    calls.map((c) => [c.tool_call.name, c.tool_call.id, c.tool_response.id, c.tool_response.content]),
    [
      ['get', 'call_1', 'call_1', 'new'],
      ['transfer_to_human_agents', 'call_2', 'call_2', ''],
    ],
  );
  assert.equal(referenceToolCalls(made, [])[1]!.tool_call.id, 'call_agent_2');
});

const work = testTempDir('tbt-conformance-');
fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid of its own
const file = path.join(work, 'conformance_tests.py');
fs.writeFileSync(
  file,
  [
    'from thinkingbox.common import Judge, TestContext',
    '',
    'def test_transfer(x: TestContext, judge: Judge):',
    '    assert x.tool_calls[-1].tool_call.name == "transfer_to_human_agents"',
    '    assert judge.text_yesno(x.tool_calls[-1].tool_call.arguments["summary"], "Is a refund asked for?")',
    '    return True',
    '',
    'def test_returns_false(x, judge):',
    '    return False',
    '',
  ].join('\n'),
);
const context: TestContext = {
  effects: {},
  response: '',
  tool_calls: referenceToolCalls(
    [{ name: 'transfer_to_human_agents', arguments: { summary: 'refund' }, result: '', isError: false }],
    [],
  ),
  messages: [],
  init_result: {},
  session_id: 's',
  metadata: {},
  tool_direct_responses: [],
};
const sandbox = new DatasetSandbox({ unsandboxed: true, log: () => undefined });
const run = (fn: string, answer: string, judgeType?: 'legacy' | 'motivation') =>
  runTestCase({
    file,
    function: fn,
    context,
    judge: judgeFrom(async () => ({ text: answer, usage: { input: 3, output: 1 } })),
    timeoutMs: 60_000,
    python: datasetPython(),
    sandbox,
    ...(judgeType ? { judgeType } : {}),
  });

test('a typed x.tool_calls test passes; the verdict is the test judge reading of the answer', async () => {
  const legacy = await run('test_transfer', 'Yes.');
  assert.equal(legacy.status, 'pass', legacy.message);
  assert.equal(legacy.reward, 1);
  assert.deepEqual(legacy.verdicts, [
    { question: 'Is a refund asked for?', answer: 'Yes.', yes: true, usage: { input: 3, output: 1 } },
  ]);
  const motivated = await run('test_transfer', '{"motivation": "It asks.", "answer": "Yes"}', 'motivation');
  assert.equal(motivated.status, 'pass', motivated.message);
  assert.equal(motivated.verdicts[0]?.yes, true);
  const unparsed = await run('test_transfer', 'Yes', 'motivation');
  assert.equal(unparsed.status, 'fail');
  assert.equal(unparsed.verdicts[0]?.yes, false, 'an answer that is not JSON is a no for the motivation judge');
});

test('a test returning False passes with reward 0, as in the reference', async () => {
  const result = await run('test_returns_false', 'unused');
  assert.deepEqual([result.status, result.reward], ['pass', 0]);
});

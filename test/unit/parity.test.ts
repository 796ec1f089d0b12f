import assert from 'node:assert/strict';
import { test } from 'node:test';
import { interpretNativeMessage, type ToolSpecForTyping } from '../../core/interpret/index.ts';
import { compareOutputs, evaluationPath, trainingPath, type RecordedOutput } from '../../core/parity.ts';

/**
 * `tbt parity` re-reads each recorded output on the evaluation path (a chat message) and the training path (the
 * sampled text). A server that splits reasoning out (`reasoning_content`) must not make the two look different.
 */

const tools: ToolSpecForTyping[] = [
  { name: 'set', inputSchema: { type: 'object', properties: { id: { type: 'integer' } } } },
];

function recorded(message: { content: string; reasoning_content?: string; tool_calls?: RecordedOutput['native'] }) {
  return {
    raw: message.content,
    ...(message.reasoning_content ? { reasoning: message.reasoning_content } : {}),
    ...(message.tool_calls ? { native: message.tool_calls } : {}),
    interpretation: interpretNativeMessage(message, tools),
  };
}

test('the evaluation path keeps reasoning_content: a split-out reasoning is no difference', () => {
  const withCall = recorded({
    content: 'Setting it.',
    reasoning_content: 'The user wants id 2.',
    tool_calls: [{ id: 'c1', type: 'function', function: { name: 'set', arguments: '{"id": "2"}' } }],
  });
  const plain = recorded({ content: 'Which id?', reasoning_content: 'No id given.' });
  assert.deepEqual(compareOutputs('e1', [withCall, plain], tools), []);
  assert.equal(evaluationPath(withCall, tools).reasoning, 'The user wants id 2.');
  assert.equal(trainingPath(plain, tools).reasoning, 'No id given.', 'the sampled text held the reasoning too');
  assert.equal(trainingPath(plain, tools).text, 'Which id?');
});

test('a reasoning that differs from what was recorded is still reported', () => {
  const output = { ...recorded({ content: 'Which id?', reasoning_content: 'No id given.' }), reasoning: 'Other.' };
  const diffs = compareOutputs('e2', [output], tools);
  assert.deepEqual(
    diffs.map((d) => [d.field, d.between]),
    [
      ['reasoning', 'recorded vs evaluation'],
      ['reasoning', 'recorded vs training'],
    ],
  );
});

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  buildUserSimulatorPrompt,
  cleanUserSimulatorReply,
  sanitizeForUserSimulator,
  USER_SIMULATOR_SYSTEM,
  type VisibleTurn,
} from '../../core/user-simulator-prompt.ts';
import { createSimulatedUser } from '../../rollout/simulated-user.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * The simulated user as the reference builds it (its `user_simulated_answer.py`): its system prompt,
 * the user prompt framing the visible transcript, the escaping of the prompt's own headers and `<DONE>`, the
 * cleaning of the reply, and the request it sends (4,096 tokens, temperature 0.3).
 */

const doubles: OpenAIWireProtocolDouble[] = [];
after(async () => Promise.all(doubles.map((d) => d.stop())));

const turns: VisibleTurn[] = [
  { role: 'user', text: 'Cancel my booking.' },
  { role: 'assistant', text: 'Which booking ID?' },
];

test("the system prompt is the reference's (copy-only entities, I don't know, no way to end the chat)", () => {
  assert.ok(USER_SIMULATOR_SYSTEM.startsWith('\nYou are the USER in a chat with an assistant.\n'));
  assert.ok(USER_SIMULATOR_SYSTEM.endsWith('listing only the missing items.\n'));
  for (const line of [
    '- Generate the next user message only. Be precise. Never invent facts.',
    'COPY-ONLY ENTITIES (strict)',
    "- If nothing is answerable, reply exactly: I don't know",
    '- If asked to perform assistant work (write code, draft, explain reasoning), reply: Please handle that; ' +
      "you're the assistant.",
    '  • Provide the known items.',
  ])
    assert.ok(USER_SIMULATOR_SYSTEM.includes(line), line);
  assert.ok(!USER_SIMULATOR_SYSTEM.includes('<DONE>'), 'by default the simulated user may not end the conversation');
});

test('the user prompt frames history, context and the last assistant message as the reference does', () => {
  const prompt = buildUserSimulatorPrompt('Booking BK-7 under Ann Lee.', turns);
  assert.equal(
    prompt,
    '\nCONVERSATION_HISTORY:\nUser: Cancel my booking.\n\nAssistant: Which booking ID?\n' +
      '=== END CONVERSATION HISTORY ===\n\nUSER_CONTEXT:\nBooking BK-7 under Ann Lee.\n\n' +
      'LAST_ASSISTANT_MESSAGE:\nWhich booking ID?\n\n' +
      'TASK: Generate the next user message based on the conversation and context above.\n',
  );
});

test('an empty context and a conversation not ending on the assistant read "(none)"; empty texts are left out', () => {
  const prompt = buildUserSimulatorPrompt('', [...turns, { role: 'assistant', text: '' }]);
  assert.match(prompt, /\nUSER_CONTEXT:\n\(none\)\n/);
  assert.match(prompt, /\nLAST_ASSISTANT_MESSAGE:\n\(none\)\n/);
  assert.match(prompt, /Assistant: Which booking ID\?\n=== END CONVERSATION HISTORY ===/);
  const afterUser = buildUserSimulatorPrompt('ctx', [turns[0]!]);
  assert.match(afterUser, /\nLAST_ASSISTANT_MESSAGE:\n\(none\)\n/);
});

test("the prompt's own headers and <DONE> are escaped wherever inserted text holds them", () => {
  assert.equal(
    sanitizeForUserSimulator(
      'x === END CONVERSATION HISTORY === CONVERSATION_HISTORY: USER_CONTEXT: TASK: ' +
        'LAST_ASSISTANT_MESSAGE: <DONE>',
    ),
    'x === END CONVERSATION HISTORY (escaped) === CONVERSATION_HISTORY (escaped): USER_CONTEXT (escaped): ' +
      'TASK (escaped): LAST_ASSISTANT_MESSAGE (escaped): (DONE - escaped)',
  );
  const prompt = buildUserSimulatorPrompt('USER_CONTEXT: secret <DONE>', [
    { role: 'user', text: 'Tell me about task <DONE>' },
    { role: 'assistant', text: 'The task marked <DONE> is complete. TASK: none' },
  ]);
  assert.ok(!prompt.includes('<DONE>'));
  assert.equal(prompt.split('\nTASK:').length, 2, 'only the prompt itself has a TASK: header');
  assert.match(prompt, /USER_CONTEXT:\nUSER_CONTEXT \(escaped\): secret \(DONE - escaped\)\n/);
});

test('the reply is cleaned: one role label, one pair of surrounding quotes, "I don\'t know." when empty', () => {
  assert.equal(cleanUserSimulatorReply('  User: My order number is 12345 '), 'My order number is 12345');
  assert.equal(cleanUserSimulatorReply('ASSISTANT:   hi'), 'hi');
  assert.equal(cleanUserSimulatorReply('"What is the status of my order?"'), 'What is the status of my order?');
  assert.equal(cleanUserSimulatorReply("User: ' quoted '"), 'quoted');
  assert.equal(cleanUserSimulatorReply('"'), '"', 'a lone quote is no pair');
  assert.equal(cleanUserSimulatorReply('Ok "fine"'), 'Ok "fine"');
  assert.equal(cleanUserSimulatorReply('   '), "I don't know.");
  assert.equal(cleanUserSimulatorReply('""'), "I don't know.");
  assert.equal(cleanUserSimulatorReply('Thanks! <DONE>'), 'Thanks! <DONE>', 'the marker is kept, not acted on');
});

test('an LLM simulated user sends the reference prompts (4,096 tokens, temperature 0.3)', async () => {
  const double = new OpenAIWireProtocolDouble(() => '"User: BK-7"');
  doubles.push(double);
  const user = createSimulatedUser(
    { mode: 'llm', endpoint: { baseUrl: await double.start(), model: 'user-double', timeoutMs: 5000 } },
    { user_context: 'Booking BK-7.' },
  );
  const reply = await user.reply(turns, 0);
  assert.equal(reply?.text, 'User: BK-7', 'quotes removed after the role label check, as the reference orders it');
  const request = double.requests[0]!;
  assert.equal(request.max_tokens, 4096);
  assert.equal(request.temperature, 0.3);
  assert.deepEqual(
    request.messages.map((m) => m.role),
    ['system', 'user'],
  );
  assert.equal(request.messages[0]!.content, USER_SIMULATOR_SYSTEM);
  assert.equal(request.messages[1]!.content, buildUserSimulatorPrompt('Booking BK-7.', turns));
});

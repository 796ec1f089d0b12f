import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { detokenize, tokenizeMessages, type ChatMessage, type Endpoint } from '../rollout/policy-client.ts';
import { createTokenDriver } from '../rollout/policy-driver.ts';
import { systemMessageDecision } from '../rollout/system-message-handling.ts';
import { thinkOpeningDecision } from '../rollout/think-opening.ts';
import { interpretCompletion } from '../core/interpret/index.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';

/**
 * Token mode on the real, public chat templates of the Qwen3 family (Hermes JSON and XML tool-call styles, and
 * Qwen3.5's pre-opened `<think>`) and on SmolLM2's own, each rendered by the bundled SmolLM2 tokenizer (it shares
 * ChatML's special tokens). The driver must start, sample, and append observations token-exactly on every one;
 * the fixtures and their sources are in test/fixtures/chat-templates/.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'chat-templates');
const servers: PolicyServerHandle[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function serve(template: string): Promise<Endpoint> {
  const server = await startPolicyServer({
    engine: 'builtin',
    chatTemplate: path.join(fixtures, template),
    logFile: path.join(os.tmpdir(), `tbt-template-${template}.log`),
  });
  servers.push(server);
  return { baseUrl: server.baseUrl, model: server.model };
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'set_power',
      description: 'Turn a device on or off.',
      parameters: {
        type: 'object',
        properties: { device_id: { type: 'integer', description: 'Device id' }, on: { type: 'boolean' } },
        required: ['device_id', 'on'],
      },
    },
  },
];
const toolSpecs = [{ name: 'set_power', inputSchema: tools[0]!.function.parameters }];
const start: ChatMessage[] = [
  { role: 'system', content: 'You control a smart home.' },
  { role: 'user', content: 'Turn device 2 on.' },
];
const toolResult: ChatMessage[] = [{ role: 'tool', content: '{"affected": 1}' }];
const userReply: ChatMessage[] = [{ role: 'user', content: 'Thanks. Now check it.' }];
// Stop at the first newline so every sampled turn ends on a stop string (then the driver closes the turn).
const sampling = { temperature: 0, topP: 1, maxTokens: 48, stop: ['\n'] };

/** Runs two sampled turns with observations in between; returns the whole trajectory's text and its parts. */
async function twoTurns(endpoint: Endpoint) {
  const driver = createTokenDriver(endpoint);
  await driver.start(start, tools);
  const prompt = await tokenizeMessages(endpoint, start, { addGenerationPrompt: true, tools });
  assert.deepEqual(driver.trajectory()!.tokenIds, prompt, 'the prompt is the server rendering of system + user');
  const first = await driver.generate(sampling);
  assert.equal(first.finishReason, 'stop', `first turn stopped (${JSON.stringify(first.raw)})`);
  await driver.observe([...toolResult, ...userReply]);
  const second = await driver.generate(sampling);
  assert.equal(second.finishReason, 'stop', `second turn stopped (${JSON.stringify(second.raw)})`);
  await driver.observe(toolResult);
  const t = driver.trajectory()!;
  assert.equal(t.tokenIds.length, t.lossMask.length);
  assert.equal(t.tokenIds.length, t.logprobs.length);
  const sampled = t.lossMask.filter((m) => m === 1).length;
  assert.equal(sampled, first.usage.output + second.usage.output, 'only the sampled tokens carry mask 1');
  const text = await detokenize(endpoint, t.tokenIds);
  const promptText = await detokenize(endpoint, prompt);
  // A turn that ended on the end-of-turn token sampled it (its text then ends with it); the driver adds only the rest.
  const content = (raw: string) => raw.replace(/<\|im_end\|>$/, '');
  return { text, promptText, first: content(first.raw), second: content(second.raw) };
}

test('Qwen3 (Hermes JSON tool calls): system + user anchor, two turns with tool results token-exact', async () => {
  const endpoint = await serve('qwen3.jinja');
  const { text, promptText, first, second } = await twoTurns(endpoint);
  // Rendered with two system messages, the template takes them: ThinkingBox openings go unmerged.
  assert.deepEqual(await systemMessageDecision(endpoint), { systemMessages: 'separate', rendered: true });
  // The generation prompt opens no think block: the model writes its own `<think>`.
  assert.deepEqual(await thinkOpeningDecision(endpoint), { thinkPreopened: false, rendered: true });
  assert.match(promptText, /# Tools[\s\S]*"name": "set_power"[\s\S]*<\|im_start\|>assistant\n$/);
  assert.equal(
    text,
    `${promptText}${first}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": ` +
      `1}\n</tool_response><|im_end|>\n` +
      `<|im_start|>user\nThanks. Now check it.<|im_end|>\n<|im_start|>assistant\n` +
      `${second}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": 1}\n</tool_response><|im_end|>\n` +
      `<|im_start|>assistant\n`,
  );
  // The reason the anchor holds no assistant turn: Qwen3 renders a last assistant turn with an (empty) think
  // block and drops it once a user turn follows, so an assistant anchor re-renders differently.
  const withAssistant = [...start, { role: 'assistant' as const, content: 'ok' }];
  const alone = await detokenize(
    endpoint,
    await tokenizeMessages(endpoint, withAssistant, { addGenerationPrompt: false, tools }),
  );
  const followed = await detokenize(
    endpoint,
    await tokenizeMessages(endpoint, [...withAssistant, ...userReply], { addGenerationPrompt: true, tools }),
  );
  assert.ok(alone.includes('<think>') && !followed.startsWith(alone));
  // What the template teaches, the shared interpreter reads: Hermes JSON, arguments typed from the schema.
  const call = interpretCompletion(
    '<think>\nDevice 2.\n</think>\n\n<tool_call>\n{"name": "set_power", "arguments": {"device_id": "2", "on": ' +
      'true}}\n</tool_call>',
    toolSpecs,
  );
  assert.deepEqual(
    call.toolCalls.map((c) => [c.name, c.arguments]),
    [['set_power', { device_id: 2, on: true }]],
  );
  assert.equal(call.reasoning, 'Device 2.');
});

test('Qwen3-Coder (XML tool calls): system + user anchor, two turns with tool results token-exact', async () => {
  const endpoint = await serve('qwen3-coder.jinja');
  const { text, promptText, first, second } = await twoTurns(endpoint);
  // Rendered with two system messages, the template takes them: ThinkingBox openings go unmerged.
  assert.deepEqual(await systemMessageDecision(endpoint), { systemMessages: 'separate', rendered: true });
  assert.match(promptText, /<function>\n<name>set_power<\/name>[\s\S]*<\|im_start\|>assistant\n$/);
  assert.equal(
    text,
    `${promptText}${first}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": ` +
      `1}\n</tool_response>\n<|im_end|>\n` +
      `<|im_start|>user\nThanks. Now check it.<|im_end|>\n<|im_start|>assistant\n` +
      `${second}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": 1}\n</tool_response>\n<|im_end|>\n` +
      `<|im_start|>assistant\n`,
  );
  const call = interpretCompletion(
    '<tool_call>\n<function=set_power>\n<parameter=device_id>\n2\n</parameter>\n' +
      '<parameter=on>\ntrue\n</parameter>\n</function>\n</tool_call>',
    toolSpecs,
  );
  assert.deepEqual(
    call.toolCalls.map((c) => [c.name, c.arguments]),
    [['set_power', { device_id: 2, on: true }]],
  );
});

test('Qwen3.5 (XML tool calls, pre-opened <think>): two turns with tool results token-exact', async () => {
  const endpoint = await serve('qwen3.5.jinja');
  const { text, promptText, first, second } = await twoTurns(endpoint);
  // The generation prompt ends inside an open think block, found by rendering, and every turn starts there.
  assert.deepEqual(await thinkOpeningDecision(endpoint), { thinkPreopened: true, rendered: true });
  assert.match(promptText, /<tools>\n\{"type": "function", "function": \{"name": "set_power"/);
  assert.match(promptText, /<\/IMPORTANT>\n\nYou control a smart home\.<\|im_end\|>\n<\|im_start\|>user\n/);
  assert.ok(promptText.endsWith('<|im_start|>user\nTurn device 2 on.<|im_end|>\n<|im_start|>assistant\n<think>\n'));
  assert.equal(
    text,
    `${promptText}${first}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": ` +
      `1}\n</tool_response><|im_end|>\n` +
      `<|im_start|>user\nThanks. Now check it.<|im_end|>\n<|im_start|>assistant\n<think>\n` +
      `${second}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": 1}\n</tool_response><|im_end|>\n` +
      `<|im_start|>assistant\n<think>\n`,
  );
  // Two system messages are refused (the template raises), so ThinkingBox openings are merged into one.
  const strict = await systemMessageDecision(endpoint);
  assert.equal(strict.systemMessages, 'merged');
  assert.match(strict.detail ?? '', /System message must be at the beginning/);
  // What the template teaches, read from a completion that starts inside the think it opened.
  const call = interpretCompletion(
    'Device 2, switch on.\n</think>\n\n<tool_call>\n<function=set_power>\n<parameter=device_id>\n2\n' +
      '</parameter>\n<parameter=on>\ntrue\n</parameter>\n</function>\n</tool_call>',
    toolSpecs,
    { thinkPreopened: true },
  );
  assert.equal(call.reasoning, 'Device 2, switch on.');
  assert.equal(call.text, '');
  assert.deepEqual(
    call.toolCalls.map((c) => [c.name, c.arguments]),
    [['set_power', { device_id: 2, on: true }]],
  );
});

test("SmolLM2's own template: two turns with tool results token-exact", async () => {
  const endpoint = await serve('smollm2.jinja');
  const { text, promptText, first, second } = await twoTurns(endpoint);
  assert.equal(
    text,
    `${promptText}${first}<|im_end|>\n<|im_start|>tool\n{"affected": 1}<|im_end|>\n` +
      `<|im_start|>user\nThanks. Now check it.<|im_end|>\n<|im_start|>assistant\n` +
      `${second}<|im_end|>\n<|im_start|>tool\n{"affected": 1}<|im_end|>\n<|im_start|>assistant\n`,
  );
});

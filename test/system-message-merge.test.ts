import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { createEpisodeActivities } from '../activities/episode-activities.ts';
import { repoRoot } from '../config/environment.ts';
import type { EpisodeEnvironment, EpisodeTask } from '../rollout/episode-environment.ts';
import { playEpisode, type EpisodeOptions } from '../rollout/episode-runner.ts';
import { detokenize, tokenizeMessages, type Endpoint } from '../rollout/policy-client.ts';
import { createChatDriver, createTokenDriver, type PolicyDriver } from '../rollout/policy-driver.ts';
import { createSimulatedUser } from '../rollout/simulated-user.ts';
import { systemMessageDecision } from '../rollout/system-message-handling.ts';
import { ungradedReport } from '../sandbox/terminal-state-grader.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';
import { OpenAIWireProtocolDouble } from './helpers/openai-wire-double.ts';

/**
 * ThinkingBox episodes send two system messages (the agent's, then the domain's). A template that raises on a
 * system message after index 0 (as Qwen3.5's does) must get them merged into one, in token and in chat mode;
 * the fixture `qwen3-system-first.jinja` is Qwen3's template with that check, `qwen3.5.jinja` is Qwen3.5's own
 * (test/fixtures/chat-templates/). The same check on the unmodified Qwen3 templates ("separate") is in
 * chat-templates-token-mode.test.ts.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'chat-templates');
const servers = new Map<string, PolicyServerHandle>();
after(async () => {
  for (const s of servers.values()) await s.stop();
});

async function serve(template: string): Promise<Endpoint> {
  let server = servers.get(template);
  if (!server) {
    server = await startPolicyServer({
      engine: 'builtin',
      chatTemplate: path.join(fixtures, template),
      logFile: path.join(os.tmpdir(), `tbt-system-merge-${template}.log`),
    });
    servers.set(template, server);
  }
  return { baseUrl: server.baseUrl, model: server.model };
}

const AGENT = 'You are a careful agent.';
const DOMAIN = 'You help the customers of a small bakery.';

/** An imported-suite environment with the reference's two system messages and no tools; grading is a stub. */
const environment: EpisodeEnvironment = {
  systemMessages: [AGENT, DOMAIN],
  examples: [],
  gradeTimeoutMs: 10_000,
  async open() {
    return {
      tools: { listTools: async () => [], callTool: async () => ({ text: '', isError: true }), close: async () => {} },
      grade: async () => ({ ...ungradedReport(), cause: 'stub grading' }),
      close: async () => {},
    };
  },
};
const task: EpisodeTask = {
  uid: 'merge/one',
  query: 'Is there rye bread today?',
  limits: { max_user_turns: 0, max_agent_turns: 1 },
};
const options: EpisodeOptions = {
  sampling: { temperature: 0, topP: 1 },
  limits: { maxAgentTurns: 1, maxTokensPerTurn: 8, episodeTokenBudget: 4096, wallClockMs: 120_000 },
  prompt: { toolsInPrompt: false, example: false },
};

function episode(policy: PolicyDriver, env: EpisodeEnvironment = environment) {
  return playEpisode(
    { environment: env, policy, user: createSimulatedUser({ mode: 'scripted' }, task) },
    task,
    'test:system-merge',
    options,
  );
}

/** The same environment offering one tool, which a Qwen3.5 template renders into the system message it builds. */
const STOCK_TOOL = {
  name: 'bread_stock',
  description: 'Loaves left of one bread.',
  inputSchema: { type: 'object', properties: { bread: { type: 'string' } }, required: ['bread'] },
};
const withTool: EpisodeEnvironment = {
  ...environment,
  async open(owner) {
    const opened = await environment.open(owner);
    return { ...opened, tools: { ...opened.tools, listTools: async () => [STOCK_TOOL] } };
  },
};

test('token mode, a template refusing two system messages: the prompt renders one merged system message', async () => {
  const endpoint = await serve('qwen3-system-first.jinja');
  const record = await episode(createTokenDriver(endpoint));
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.equal(record.systemMessages, 'merged');
  const t = record.trajectory!;
  const prompt = await detokenize(endpoint, t.tokenIds.slice(0, t.lossMask.indexOf(1)));
  assert.equal(prompt.split('<|im_start|>system').length - 1, 1, prompt);
  assert.ok(prompt.startsWith(`<|im_start|>system\n${AGENT}\n\n${DOMAIN}<|im_end|>\n<|im_start|>user\n`), prompt);
  // The conversation as the agent's tests read it (`x.messages`) keeps the reference's two messages.
  assert.deepEqual(
    record.messages.filter((m) => m.role === 'system').map((m) => m.content),
    [AGENT, DOMAIN],
  );
});

test("Qwen3.5's own template, token mode with a tool: both system messages reach its one system turn", async () => {
  const endpoint = await serve('qwen3.5.jinja');
  const record = await episode(createTokenDriver(endpoint), withTool);
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.equal(record.systemMessages, 'merged');
  const t = record.trajectory!;
  const prompt = await detokenize(endpoint, t.tokenIds.slice(0, t.lossMask.indexOf(1)));
  // As the template expects: one system turn, its tool list first, then the system text, both parts in order.
  assert.equal(prompt.split('<|im_start|>system').length - 1, 1, prompt);
  assert.match(prompt, /^<\|im_start\|>system\n# Tools\n[\s\S]*"name": "bread_stock"[\s\S]*<\/IMPORTANT>\n\n/);
  assert.ok(
    prompt.endsWith(
      `</IMPORTANT>\n\n${AGENT}\n\n${DOMAIN}<|im_end|>\n<|im_start|>user\n${task.query}<|im_end|>\n` +
        '<|im_start|>assistant\n<think>\n',
    ),
    prompt,
  );
  // The server's own rendering of the merged opening is the prompt, token for token.
  const merged = [
    { role: 'system' as const, content: `${AGENT}\n\n${DOMAIN}` },
    { role: 'user' as const, content: task.query },
  ];
  const { name, description, inputSchema: parameters } = STOCK_TOOL;
  const tools = [{ type: 'function', function: { name, description, parameters } }];
  const expected = await tokenizeMessages(endpoint, merged, { addGenerationPrompt: true, tools });
  assert.deepEqual(t.tokenIds.slice(0, t.lossMask.indexOf(1)), expected);
  assert.deepEqual(
    record.messages.filter((m) => m.role === 'system').map((m) => m.content),
    [AGENT, DOMAIN],
  );
});

test("Qwen3.5's own template, chat mode: the merged opening is accepted and the episode completes", async () => {
  const endpoint = await serve('qwen3.5.jinja');
  const record = await episode(createChatDriver(endpoint), withTool);
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.equal(record.systemMessages, 'merged');
  // The tiny model may stay inside the pre-opened reasoning: the agent is then asked again (reasoning only).
  assert.ok(record.completions.length >= 1);
});

test('chat mode, template that rejects a second system message: the episode completes', async () => {
  const endpoint = await serve('qwen3-system-first.jinja');
  const record = await episode(createChatDriver(endpoint));
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.equal(record.systemMessages, 'merged');
  // The tiny model may stay inside the pre-opened reasoning: the agent is then asked again (reasoning only).
  assert.ok(record.completions.length >= 1);
});

test('the rendering check refuses two system messages on the strict template: merged, with its refusal', async () => {
  const strict = await systemMessageDecision(await serve('qwen3-system-first.jinja'));
  assert.equal(strict.systemMessages, 'merged');
  assert.match(strict.detail ?? '', /HTTP 400: .*System message must be at the beginning/);
});

test('a chat API without /tokenize gets the two system messages as they are, and no extra request', async () => {
  const api = new OpenAIWireProtocolDouble(() => 'We have rye bread until noon.');
  const baseUrl = await api.start();
  try {
    const record = await episode(createChatDriver({ baseUrl, model: 'hosted-double' }));
    assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
    assert.equal(record.systemMessages, 'separate');
    assert.equal(api.requests.length, 1);
    assert.deepEqual(
      api.requests[0]!.messages.map((m) => [m.role, m.content]),
      [
        ['system', AGENT],
        ['system', DOMAIN],
        ['user', task.query],
      ],
    );
    const decision = await systemMessageDecision({ baseUrl, model: 'hosted-double' });
    assert.equal(decision.rendered, false);
  } finally {
    await api.stop();
  }
});

test('the manifest entry comes from the rollout activity: merged on the strict template, as-is on an API', async () => {
  const { policySystemMessages } = createEpisodeActivities({} as never);
  const strict = await serve('qwen3-system-first.jinja');
  const entry = await policySystemMessages({ policy: { base_url: strict.baseUrl, model: strict.model } as never });
  assert.deepEqual(entry, { system_messages: 'merged' });
  const api = new OpenAIWireProtocolDouble(() => 'unused');
  const baseUrl = await api.start();
  try {
    const hosted = await policySystemMessages({ policy: { base_url: baseUrl, model: 'hosted-double-2' } as never });
    assert.deepEqual(hosted, { system_messages: 'separate', system_messages_rendered: false });
  } finally {
    await api.stop();
  }
});

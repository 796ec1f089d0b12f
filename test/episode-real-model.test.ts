import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { repoRoot } from '../config/environment.ts';
import { episodeDependencies, episodeRunOptions } from '../rollout/episode-setup.ts';
import { findNativeTask } from '../rollout/task-lookup.ts';
import { sandboxEnvironment } from '../rollout/episode-environment.ts';
import { playEpisode, type EpisodeRecord } from '../rollout/episode-runner.ts';
import { detokenize, tokenizeMessages } from '../rollout/policy-client.ts';
import { createTokenDriver } from '../rollout/policy-driver.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { parity } from '../cli/commands/parity.ts';
import { interpretCompletion } from '../core/interpret/index.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';
import { controlReady, newPool } from './helpers/stack.ts';

/** Real episodes: vLLM's CPU build serving the real SmolLM2-135M-Instruct, token-exact (and in chat mode). */

const tiny = path.join(repoRoot, 'tasks', 'tiny');
let server: PolicyServerHandle;
let pool: SandboxPool;
let grader: TerminalStateGrader;
const records: { id: string; record: EpisodeRecord }[] = [];

before(async () => {
  const controlUrl = await controlReady();
  pool = newPool({ warm: 1 });
  grader = new TerminalStateGrader(pool, controlUrl);
  server = await startPolicyServer({ engine: 'vllm', logFile: path.join(os.tmpdir(), 'tbt-policy-server-test.log') });
});
after(async () => {
  await pool.close();
  await server?.stop();
});

async function episode(uid: string, mode: 'tokens' | 'chat', baseUrl = server.baseUrl) {
  const { task, scenario } = findNativeTask(tiny, uid);
  const config = episodeConfigSchema.parse({
    policy: { base_url: baseUrl, model: server.model, mode, timeout_ms: 120_000 },
    sampling: { temperature: 0 },
    limits: { max_agent_turns: 3, max_tokens_per_turn: 96, wall_clock_ms: 240_000 },
    prompt: { tools_in_prompt: true, example: true },
  });
  return playEpisode(
    episodeDependencies(config, sandboxEnvironment(pool, grader, scenario, task), task),
    task,
    `test:real:${uid}`,
    episodeRunOptions(config),
  );
}

test(
  'a real token-exact episode: prompt and observations rendered by the server, sampled ids with mask 1 and their ' +
    'logprobs',
  async () => {
    const record = await episode('tiny/todo/complete-2', 'tokens');
    records.push({ id: 'real-tokens', record });
    assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
    const t = record.trajectory!;
    assert.ok(t, 'training episodes carry their token trajectory');
    assert.equal(t.tokenIds.length, t.lossMask.length);
    assert.equal(t.tokenIds.length, t.logprobs.length);
    assert.equal(
      t.lossMask.filter((m) => m === 1).length,
      record.usage.policy.output,
      'every sampled token, and only those, has mask 1',
    );
    // The prompt is exactly the server's rendering of the first two messages.
    const prompt = await tokenizeMessages(
      { baseUrl: server.baseUrl, model: server.model },
      record.messages.slice(0, 2),
      {
        addGenerationPrompt: true,
      },
    );
    assert.deepEqual(t.tokenIds.slice(0, prompt.length), prompt);
    assert.ok(t.lossMask.slice(0, prompt.length).every((m) => m === 0));
    // Each sampled segment decodes to the completion the interpreter saw; sampled logprobs are real.
    const segments: number[][] = [];
    t.lossMask.forEach((m, i) => {
      if (m === 1 && (i === 0 || t.lossMask[i - 1] === 0)) segments.push([]);
      if (m === 1) segments.at(-1)!.push(t.tokenIds[i]!);
    });
    assert.equal(segments.length, record.completions.length);
    for (const [i, seg] of segments.entries()) {
      const text = await detokenize({ baseUrl: server.baseUrl, model: server.model }, seg);
      assert.equal(text.replace(/<\|im_end\|>$/, ''), record.completions[i]!.raw);
    }
    const sampled = t.logprobs.filter((_, i) => t.lossMask[i] === 1);
    assert.ok(sampled.every((lp) => lp <= 0) && sampled.some((lp) => lp < 0));
    // Observations (tool results, user turns) are mask 0 and re-render to the same text as the conversation.
    const whole = await detokenize({ baseUrl: server.baseUrl, model: server.model }, t.tokenIds);
    for (const m of record.messages.filter((m) => m.role === 'tool'))
      assert.ok(
        whole.includes(`<|im_start|>tool\n${m.content}<|im_end|>\n`),
        'tool results sit in the trajectory as rendered by the template',
      );
  },
);

test('a real chat-mode episode with the same model completes and is graded', async () => {
  const record = await episode('tiny/thermostat/power-on-2', 'chat');
  records.push({ id: 'real-chat', record });
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.ok(['success', 'agent_failure'].includes(record.outcome));
  assert.ok(record.completions.length >= 1);
});

test('tbt parity passes on the recorded real episodes and fails when the two paths diverge', async () => {
  const file = path.join(os.tmpdir(), `tbt-parity-${process.pid}.jsonl`);
  fs.writeFileSync(file, records.map((r) => JSON.stringify(r)).join('\n'));
  assert.equal(await parity([file]), 0);
  // A training path that forgets to type arguments from the schema diverges on any typed tool call.
  const untyped = (o: { raw: string }) => {
    const i = interpretCompletion(o.raw, []);
    return {
      ...i,
      toolCalls: i.toolCalls.map((c) => ({
        ...c,
        arguments: Object.fromEntries(Object.entries(c.arguments).map(([k, v]) => [k, String(v)])),
      })),
    };
  };
  const typedCall = {
    id: 'synthetic',
    record: {
      tools: [{ name: 'set', inputSchema: { type: 'object', properties: { id: { type: 'integer' } } } }],
      completions: [
        {
          raw: '<tool_call>\n{"name": "set", "arguments": {"id": "2"}}\n</tool_call>',
          interpretation: interpretCompletion('<tool_call>\n{"name": "set", "arguments": {"id": "2"}}\n</tool_call>', [
            { name: 'set', inputSchema: { type: 'object', properties: { id: { type: 'integer' } } } },
          ]),
        },
      ],
    },
  };
  fs.appendFileSync(file, `\n${JSON.stringify(typedCall)}`);
  const { evaluationPath } = await import('../core/parity.ts');
  assert.equal(await parity([file], { training: untyped, evaluation: evaluationPath }), 1);
});

test('a chat template that renders the anchor differently when messages follow it fails loudly', async () => {
  const template = path.join(os.tmpdir(), `tbt-unstable-template-${process.pid}.jinja`);
  // Like Qwen3 dropping earlier <think> blocks, but for the anchor's own user turn: it renders differently once
  // other messages follow it, so no observation can be appended token-exactly.
  fs.writeFileSync(
    template,
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + ('' if loop.last " +
      "or message['role'] != 'user' else ' [earlier]') + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt " +
      "%}{{ '<|im_start|>assistant\\n' }}{% endif %}",
  );
  const unstable = await startPolicyServer({
    engine: 'builtin',
    chatTemplate: template,
    logFile: path.join(os.tmpdir(), 'tbt-policy-server-unstable.log'),
  });
  const start = [
    { role: 'system' as const, content: 'You help.' },
    { role: 'user' as const, content: 'Hi.' },
  ];
  const observation = [{ role: 'tool' as const, content: '{"affected": 1}' }];
  try {
    const driver = createTokenDriver({ baseUrl: unstable.baseUrl, model: unstable.model });
    await driver.start(start);
    assert.equal((await driver.generate({ temperature: 0, topP: 1, maxTokens: 64 })).finishReason, 'stop');
    await assert.rejects(driver.observe(observation), /token anchor mismatch at position \d+/);
    // On the model's own template a finished turn is followed by its observation, token-exactly.
    const stable = createTokenDriver({ baseUrl: server.baseUrl, model: server.model });
    await stable.start(start);
    await assert.rejects(stable.observe(observation), /needs a sampled turn that ended with a stop token/);
    const turn = await stable.generate({ temperature: 0, topP: 1, maxTokens: 64 });
    assert.equal(turn.finishReason, 'stop');
    await stable.observe(observation);
    const ids = stable.trajectory()!.tokenIds;
    assert.match(
      await detokenize({ baseUrl: server.baseUrl, model: server.model }, ids),
      /<\|im_end\|>\n<\|im_start\|>tool\n\{"affected": 1\}<\|im_end\|>\n<\|im_start\|>assistant\n$/,
    );
  } finally {
    await unstable.stop();
  }
});

import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { detokenize, tokenizeMessages, type ChatMessage, type Endpoint } from '../rollout/policy-client.ts';
import { createTokenDriver } from '../rollout/policy-driver.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';

/**
 * Token mode, a turn cut at its token cap: the episode goes on (the reference interprets a cut completion and
 * continues), so the cut turn is closed by the template's end-of-turn tokens (mask 0) and the observation follows,
 * token-exactly; the budget counts everything after the opening prompt. A turn followed by nothing to observe (a
 * reasoning-only completion, after which the agent is asked again) is closed the same way. On the built-in CPU
 * server and Qwen3's public chat template (test/fixtures/chat-templates/).
 */

const servers: PolicyServerHandle[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

const start: ChatMessage[] = [
  { role: 'system', content: 'You control a smart home.' },
  { role: 'user', content: 'Turn device 2 on.' },
];
const toolResult: ChatMessage[] = [{ role: 'tool', content: '{"affected": 1}' }];

/** One server for the file (it starts in seconds, but twice is twice). */
async function qwen3Endpoint(): Promise<Endpoint> {
  if (servers.length === 0)
    servers.push(
      await startPolicyServer({
        engine: 'builtin',
        chatTemplate: path.join(repoRoot, 'test', 'fixtures', 'chat-templates', 'qwen3.jinja'),
        logFile: path.join(os.tmpdir(), `tbt-length-cut-${process.pid}.log`),
      }),
    );
  return { baseUrl: servers[0]!.baseUrl, model: servers[0]!.model };
}

test('a cut turn is closed, its observation appended; the budget counts after the prompt', async () => {
  const endpoint = await qwen3Endpoint();
  const driver = createTokenDriver(endpoint);
  await driver.start(start);
  assert.equal(driver.tokensAfterPrompt(), 0, 'the opening prompt is not counted');
  const cut = await driver.generate({ temperature: 0, topP: 1, maxTokens: 3 });
  assert.equal(cut.finishReason, 'length');
  assert.equal(driver.tokensAfterPrompt(), 3);
  await driver.observe(toolResult);
  const t = driver.trajectory()!;
  assert.equal(t.lossMask.filter((m) => m === 1).length, 3, 'only the sampled tokens carry mask 1');
  const prompt = await detokenize(endpoint, await tokenizeMessages(endpoint, start, { addGenerationPrompt: true }));
  assert.equal(
    await detokenize(endpoint, t.tokenIds),
    `${prompt}${cut.raw}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"affected": 1}\n</tool_response>` +
      `<|im_end|>\n<|im_start|>assistant\n`,
  );
  assert.equal(
    driver.tokensAfterPrompt(),
    t.tokenIds.length -
      (
        await tokenizeMessages(endpoint, start, {
          addGenerationPrompt: true,
        })
      ).length,
  );
  const next = await driver.generate({ temperature: 0, topP: 1, maxTokens: 2 });
  assert.equal(next.usage.input, t.tokenIds.length, 'the next turn samples after the observation');
});

test('observing nothing (the agent asked again after reasoning only) closes the turn and opens a new one', async () => {
  const endpoint = await qwen3Endpoint();
  const driver = createTokenDriver(endpoint);
  await driver.start(start);
  const first = await driver.generate({ temperature: 0, topP: 1, maxTokens: 3 });
  await driver.observe([]);
  const t = driver.trajectory()!;
  const prompt = await detokenize(endpoint, await tokenizeMessages(endpoint, start, { addGenerationPrompt: true }));
  assert.equal(
    await detokenize(endpoint, t.tokenIds),
    `${prompt}${first.raw}<|im_end|>\n<|im_start|>assistant\n`,
    'what the reference re-sends: the assistant message, then a generation prompt',
  );
  assert.equal(t.lossMask.filter((m) => m === 1).length, 3, 'the template tokens carry mask 0');
});

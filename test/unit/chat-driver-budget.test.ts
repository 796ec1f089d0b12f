import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { createChatDriver } from '../../rollout/policy-driver.ts';

/**
 * Chat mode's count for the episode token budget: everything after the opening prompt, as token mode counts it.
 * A stand-in chat server reports each call's usage as scripted (prompt tokens growing with the conversation, or,
 * like a template that drops earlier reasoning, shrinking).
 */

const usages = [
  { prompt_tokens: 500, completion_tokens: 40 },
  // The opening 500 + the 40 generated + a 25-token tool result.
  { prompt_tokens: 565, completion_tokens: 30 },
  // Earlier reasoning left out of the prompt (-50) and a 10-token user reply: no growth is counted, never negative.
  { prompt_tokens: 555, completion_tokens: 5 },
];
let calls = 0;
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    // Like a hosted API: no `/tokenize` (the driver's template probe is refused and uses up no scripted call).
    if (!req.url?.endsWith('/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error": "not found"}');
      return;
    }
    const usage = usages[calls++]!;
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id: `c${calls}`,
        object: 'chat.completion',
        created: 0,
        model: 'm',
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      }),
    );
  });
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

test('chat mode leaves the opening prompt out of the budget and counts outputs and observations', async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  const driver = createChatDriver({ baseUrl, model: 'm', timeoutMs: 5000 });
  await driver.start([{ role: 'user', content: 'hi' }]);
  const sampling = { temperature: 0, topP: 1, maxTokens: 100 };
  assert.equal(driver.tokensAfterPrompt(), 0);
  await driver.generate(sampling);
  assert.equal(driver.tokensAfterPrompt(), 40, 'the 500-token opening is not counted');
  await driver.observe([{ role: 'tool', content: 'result' }]);
  await driver.generate(sampling);
  assert.equal(driver.tokensAfterPrompt(), 40 + 25 + 30);
  await driver.generate(sampling);
  assert.equal(driver.tokensAfterPrompt(), 40 + 25 + 30 + 5);
});

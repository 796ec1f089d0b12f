import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { chatComplete } from '../../rollout/policy-client.ts';

/**
 * The reasoning a chat server splits out of the content arrives as `reasoning_content` (vLLM before its rename,
 * DeepSeek-style APIs) or `reasoning` (vLLM since): either is kept, so evaluation and `tbt parity` see it.
 */

let message: Record<string, unknown> = {};
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () =>
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id: 'c',
        object: 'chat.completion',
        created: 0,
        model: 'm',
        choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      }),
    ),
  );
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

test('reasoning is read from reasoning_content or from reasoning', async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const endpoint = { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, model: 'm' };
  const sampling = { temperature: 0, topP: 1, maxTokens: 8 };
  message = { content: 'Hi.', reasoning_content: 'Greet.' };
  assert.equal((await chatComplete(endpoint, [], sampling)).reasoning, 'Greet.');
  message = { content: 'Hi.', reasoning: 'Greet back.' };
  assert.equal((await chatComplete(endpoint, [], sampling)).reasoning, 'Greet back.');
  message = { content: 'Hi.' };
  assert.equal((await chatComplete(endpoint, [], sampling)).reasoning, undefined);
});

import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { InfrastructureError } from '../../core/errors.ts';
import { interpretNativeMessage } from '../../core/interpret/index.ts';
import { generationPromptOpensThink } from '../../core/interpret/think-blocks.ts';
import { evaluationPath, trainingPath } from '../../core/parity.ts';
import { thinkOpeningDecision } from '../../rollout/think-opening.ts';

/**
 * A pre-opened `<think>` is read from what the generation prompt adds to a rendered conversation; completions of
 * such a template are read as starting inside reasoning, unless the server split the reasoning out. The renderings
 * below are the real templates' (Qwen3.5's and Qwen3's, test/fixtures/chat-templates/); the end-to-end check on
 * the templates themselves is test/preopened-think.test.ts and test/chat-templates-token-mode.test.ts.
 */

const USER = '<|im_start|>user\nhello<|im_end|>\n';
const QWEN35 = { with: `${USER}<|im_start|>assistant\n<think>\n`, without: USER };
const QWEN35_NO_THINKING = { with: `${USER}<|im_start|>assistant\n<think>\n\n</think>\n\n`, without: USER };
const QWEN3 = { with: `${USER}<|im_start|>assistant\n`, without: USER };

test('the generation prompt decides, not a <think> anywhere in the conversation', () => {
  assert.equal(generationPromptOpensThink(QWEN35.with, QWEN35.without), true);
  assert.equal(generationPromptOpensThink(QWEN35_NO_THINKING.with, QWEN35_NO_THINKING.without), false);
  assert.equal(generationPromptOpensThink(QWEN3.with, QWEN3.without), false);
  const quoted = '<|im_start|>user\nanswer inside <think> tags<|im_end|>\n';
  assert.equal(generationPromptOpensThink(`${quoted}<|im_start|>assistant\n`, quoted), false);
  // Renderings that share no beginning: all of the one with the generation prompt is read.
  assert.equal(generationPromptOpensThink('<|im_start|>user\nhi<|im_start|>assistant\n<think>\n', 'X'), true);
});

test('a chat message: the pre-opened think applies to its content only when the server split nothing out', () => {
  const cut = { content: 'Device 2 is the lamp, so I' };
  const raw = interpretNativeMessage(cut, [], { thinkPreopened: true });
  assert.deepEqual([raw.reasoning, raw.text], ['Device 2 is the lamp, so I', '']);
  const split = interpretNativeMessage({ content: 'Done.', reasoning_content: 'Lamp.' }, [], { thinkPreopened: true });
  assert.deepEqual([split.reasoning, split.text], ['Lamp.', 'Done.']);
  const output = { raw: cut.content, thinkPreopened: true, interpretation: raw };
  assert.deepEqual(trainingPath(output, []), raw);
  assert.deepEqual(evaluationPath(output, []), raw);
  assert.equal(trainingPath({ ...output, thinkPreopened: false }, []).text, cut.content, 'the flag is what hides it');
});

/** A server whose template renders as `renderings` say; tokens are the characters' codes. */
function renderingServer(renderings: { with: string; without: string } | { status: number }) {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      requests.push(req.url ?? '');
      const json = JSON.parse(body) as { add_generation_prompt?: boolean; tokens?: number[] };
      if ('status' in renderings) return void res.writeHead(renderings.status).end('{"error": "refused"}');
      if (req.url === '/detokenize')
        return void res.end(JSON.stringify({ prompt: String.fromCharCode(...(json.tokens ?? [])) }));
      const text = json.add_generation_prompt ? renderings.with : renderings.without;
      res.end(JSON.stringify({ tokens: Array.from(text, (ch) => ch.charCodeAt(0)) }));
    });
  });
  return {
    requests,
    async endpoint() {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, model: 'm' };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
const closers: (() => Promise<void>)[] = [];
after(() => Promise.all(closers.map((close) => close())));

test('the decision renders with and without the generation prompt once, then is kept', async () => {
  const qwen35 = renderingServer(QWEN35);
  closers.push(qwen35.close);
  const endpoint = await qwen35.endpoint();
  assert.deepEqual(await thinkOpeningDecision(endpoint), { thinkPreopened: true, rendered: true });
  assert.deepEqual(qwen35.requests, ['/tokenize', '/detokenize', '/tokenize', '/detokenize']);
  await thinkOpeningDecision(endpoint);
  assert.equal(qwen35.requests.length, 4, 'kept for the process');
  const qwen3 = renderingServer(QWEN3);
  closers.push(qwen3.close);
  assert.deepEqual(await thinkOpeningDecision(await qwen3.endpoint()), { thinkPreopened: false, rendered: true });
});

test('no rendering route: read as not pre-opened; a server error is an infrastructure error, not kept', async () => {
  const hosted = renderingServer({ status: 404 });
  closers.push(hosted.close);
  const decision = await thinkOpeningDecision(await hosted.endpoint());
  assert.equal(decision.thinkPreopened, false);
  assert.equal(decision.rendered, false);
  const failing = renderingServer({ status: 503 });
  closers.push(failing.close);
  const endpoint = await failing.endpoint();
  await assert.rejects(thinkOpeningDecision(endpoint), InfrastructureError);
  await assert.rejects(thinkOpeningDecision(endpoint), InfrastructureError);
  assert.equal(failing.requests.length, 2, 'a failure is asked again');
});

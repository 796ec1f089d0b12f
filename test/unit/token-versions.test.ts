import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { batchRow, batchRowSchema } from '../../learner-control/batch-row.ts';
import { createTokenDriver, NO_VERSION, tokenVersion } from '../../rollout/policy-driver.ts';
import { summarize, versionTokens } from '../../rollout/episode-store.ts';
import { episodeLag, oldestVersion, versionMix, type SampledStep } from '../../workflows/sampled-step.ts';

/**
 * Per-token version bookkeeping (training.partial_rollouts): every sampled token carries the weight version that
 * drew it, mask-0 tokens NO_VERSION; a turn a weight sync interrupted (finish_reason `abort`) keeps its partial tokens
 * and goes on from them on the next version with what is left of its max_tokens. A stand-in token server renders
 * each message as [role, ...characters, END, NL] and answers completions as scripted.
 */

const ROLES = ['system', 'user', 'assistant', 'tool'];
const END = 2;
const NL = 3;
const chars = (text: string) => [...text].map((c) => c.charCodeAt(0));
const render = (messages: { role: string; content: string }[], generationPrompt: boolean) => [
  ...messages.flatMap((m) => [100 + ROLES.indexOf(m.role), ...chars(m.content), END, NL]),
  ...(generationPrompt ? [100 + ROLES.indexOf('assistant')] : []),
];

interface Scripted {
  token_ids: number[];
  logprobs: number[];
  finish_reason: string;
}
let script: Scripted[] = [];
const completionBodies: { prompt: number[]; max_tokens: number }[] = [];

const server = http.createServer((req, res) => {
  let raw = '';
  req.on('data', (chunk: Buffer) => (raw += chunk.toString()));
  req.on('end', () => {
    const body = JSON.parse(raw || '{}');
    const send = (value: unknown) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(value));
    if (req.url === '/tokenize')
      return send({ tokens: body.messages ? render(body.messages, body.add_generation_prompt) : chars(body.prompt) });
    if (req.url === '/detokenize') return send({ prompt: (body.tokens as number[]).join(' ') });
    if (req.url === '/v1/completions') {
      completionBodies.push({ prompt: body.prompt, max_tokens: body.max_tokens });
      const next = script.shift()!;
      return send({
        choices: [
          {
            text: next.token_ids.map((t) => String.fromCharCode(t)).join(''),
            token_ids: next.token_ids,
            finish_reason: next.finish_reason,
            logprobs: { token_logprobs: next.logprobs },
          },
        ],
      });
    }
    res.writeHead(404).end('{}');
  });
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function endpoint() {
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, model: 'm', timeoutMs: 5000 };
}

const sampling = { temperature: 1, topP: 1, maxTokens: 10 };

test('a turn interrupted by a sync keeps its partial tokens and goes on from them on the next version', async () => {
  script = [
    { token_ids: [65, 66, 67], logprobs: [-0.1, -0.2, -0.3], finish_reason: 'abort' },
    { token_ids: [68, END], logprobs: [-0.4, -0.5], finish_reason: 'stop' },
    { token_ids: [69, END], logprobs: [-0.6, -0.7], finish_reason: 'stop' },
  ];
  completionBodies.length = 0;
  const driver = createTokenDriver(await endpoint(), undefined, 3);
  await driver.start([{ role: 'user', content: 'hi' }]);
  const opening = driver.trajectory()!.tokenIds.length;
  const first = await driver.generate(sampling);
  assert.equal(first.finishReason, 'stop');
  assert.equal(first.raw, 'ABCD\u0002');
  assert.deepEqual(first.usage, { input: opening, output: 5, cached: 0 });
  // The continuation's prompt is every token so far, the partial ones included; its cap what is left of 10.
  const opened = render([{ role: 'user', content: 'hi' }], true);
  assert.deepEqual(completionBodies[1], { prompt: [...opened, 65, 66, 67], max_tokens: 7 });
  await driver.observe([{ role: 'tool', content: 'ok' }]);
  await driver.generate(sampling);
  const t = driver.trajectory()!;
  assert.equal(t.versions!.length, t.tokenIds.length);
  const sampled = t.versions!.filter((_, i) => t.lossMask[i] === 1);
  // Three tokens from version 3, then every later one (this turn's rest and the next turn) from version 4.
  assert.deepEqual(sampled, [3, 3, 3, 4, 4, 4, 4]);
  assert.ok(t.versions!.every((v, i) => (t.lossMask[i] === 0) === (v === NO_VERSION)));
  assert.deepEqual(
    t.logprobs.filter((_, i) => t.lossMask[i] === 1),
    [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7],
  );
  assert.deepEqual(versionTokens(t), { 3: 3, 4: 4 });
  // The batch row carries them to the learner, valid under the row's schema.
  const row = batchRow({ episodeId: 'e', advantage: 1 }, t);
  assert.deepEqual(row.sampler_versions, t.versions);
  assert.ok(batchRowSchema.safeParse(row).success);
});

test('a turn cut at its token cap by the interruption ends as length', async () => {
  script = [{ token_ids: [65, 66, 67, 68], logprobs: [-1, -1, -1, -1], finish_reason: 'abort' }];
  const driver = createTokenDriver(await endpoint(), undefined, 0);
  await driver.start([{ role: 'user', content: 'hi' }]);
  const out = await driver.generate({ ...sampling, maxTokens: 4 });
  assert.equal(out.finishReason, 'length');
  assert.equal(script.length, 0, 'no continuation asked for');
});

test('without a weight version the trajectory carries no versions', async () => {
  script = [{ token_ids: [65, END], logprobs: [-1, -1], finish_reason: 'stop' }];
  const driver = createTokenDriver(await endpoint());
  await driver.start([{ role: 'user', content: 'hi' }]);
  await driver.generate(sampling);
  assert.equal(driver.trajectory()!.versions, undefined);
  assert.equal(batchRow({ episodeId: 'e', advantage: 0 }, driver.trajectory()!).sampler_versions, undefined);
});

test('the version a server reports wins over the fallback', () => {
  assert.equal(tokenVersion('camp-1@7', 3), 7);
  assert.equal(tokenVersion(5, 3), 5);
  assert.equal(tokenVersion('base', 3), 3);
  assert.equal(tokenVersion(undefined, undefined), undefined);
});

test('lag, staleness and the step mix count the oldest token of an episode', () => {
  const trajectory = {
    tokenIds: [1, 2, 3, 4, 5],
    lossMask: [0, 1, 1, 0, 1],
    logprobs: [0, -1, -1, 0, -1],
    versions: [NO_VERSION, 2, 3, NO_VERSION, 3],
  };
  const usage = { policy: { input: 0, output: 3, cached: 0, calls: 1 }, user: {}, judge: {} };
  const summary = summarize('e1', {
    outcome: 'success',
    reward: 1,
    finishReason: 'stop' as never,
    usage: usage as never,
    weightVersion: 2,
    trajectory,
  });
  assert.deepEqual(summary.versionTokens, { 2: 1, 3: 2 });
  assert.equal(oldestVersion(summary), 2);
  assert.equal(oldestVersion({ weightVersion: 4 }), 4);
  const sample = {
    trainVersion: 4,
    groups: [{ uid: 't', episodes: [{ ...summary }, { id: 'e2', reward: 0, outcome: 'success', weightVersion: 3 }] }],
  } as unknown as SampledStep;
  // e1's oldest token is from version 2 (lag 2) though most of it is from 3; e2 lags 1.
  assert.deepEqual(episodeLag(sample), { mean: 1.5, max: 2 });
  assert.deepEqual(versionMix(sample.groups), { 2: 1, 3: 2 });
  assert.equal(versionMix([{ uid: 't', episodes: [{ id: 'x', reward: 0, outcome: 'success' }] }]), undefined);
});

test('a resumed episode replays its recorded turns with their tokens, log-probs and versions', async () => {
  script = [
    { token_ids: [65, 66], logprobs: [-0.1, -0.2], finish_reason: 'abort' },
    { token_ids: [67, END], logprobs: [-0.3, -0.4], finish_reason: 'stop' },
  ];
  const live = createTokenDriver(await endpoint(), undefined, 3);
  await live.start([{ role: 'user', content: 'hi' }]);
  const recorded = structuredClone(await live.generate(sampling));
  await live.observe([{ role: 'tool', content: 'ok' }]);
  // A new attempt: nothing is sampled for the recorded turn, and the trajectory is the one that never stopped.
  const asked = completionBodies.length;
  const resumed = createTokenDriver(await endpoint(), undefined, 3);
  await resumed.start([{ role: 'user', content: 'hi' }]);
  const replayed = resumed.replay(recorded);
  assert.equal(replayed.contextTokens, recorded.contextTokens);
  await resumed.observe([{ role: 'tool', content: 'ok' }]);
  assert.equal(completionBodies.length, asked, 'no completion was requested');
  assert.deepEqual(resumed.trajectory(), live.trajectory());
  assert.deepEqual(
    resumed.trajectory()!.versions!.filter((v) => v !== NO_VERSION),
    [3, 3, 4, 4],
  );
});

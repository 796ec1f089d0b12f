import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import { syncPolicyServers, weightLabel } from '../../learner-control/policy-weight-sync.ts';
import { completeTokens, type Endpoint } from '../../rollout/policy-client.ts';
import {
  parseWeightLabel,
  ServedWeightsWatch,
  servedAsExpected,
  SERVED_WEIGHTS_MISMATCH,
  weightExpectation,
} from '../../rollout/served-weights.ts';

/**
 * Versions that are true (rollout/served-weights.ts): an episode records the version the policy server said served
 * every completion, read from each answer, and a server that restarted on its own with its base weights fails the
 * episode (an infrastructure error naming the server and both versions) until it is synced again. The fake server
 * speaks the built-in server's protocol: vLLM's dev-mode sync routes, `/weight_info` with a boot id, and completions
 * answered with `x-tbt-served-weights` (tbt_gpu/served_weights.py).
 */

interface FakePolicyServer {
  baseUrl: string;
  /** Starts the process again: a new boot id, the base weights, no label. */
  restart(): void;
  bootId(): string;
}

const servers: http.Server[] = [];
after(() => servers.forEach((s) => s.close()));

async function fakePolicyServer(options: { header?: boolean } = {}): Promise<FakePolicyServer> {
  let boot = randomUUID();
  let label: string | null = null;
  let epoch = 0;
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', () => {
      const body = (raw ? JSON.parse(raw) : {}) as Record<string, unknown>;
      const route = (req.url ?? '').split('?')[0]!;
      const send = (payload: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(200, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify(payload));
      };
      if (route === '/weight_info') return send({ weight_version: label, boot_id: boot });
      if (route === '/update_weight_version') {
        label = String(body.new_version);
        epoch += 1;
        return send({ success: true, new_version: label });
      }
      if (route === '/collective_rpc') {
        if (body.method !== 'reload_weights') return send({ error: 'unsupported' });
        label = null;
        epoch += 1;
        return send({ results: [null] });
      }
      if (route === '/v1/completions') {
        const [held, at] = [label, epoch];
        const served = at !== epoch ? 'mixed' : held === null || held.startsWith('loading:') ? 'none' : held;
        const headers: Record<string, string> =
          options.header === false ? {} : { 'x-tbt-served-weights': served, 'x-tbt-boot-id': boot };
        const choice = { text: 'ok', token_ids: [7], finish_reason: 'stop', logprobs: { token_logprobs: [-0.1] } };
        return send({ choices: [choice] }, headers);
      }
      send({});
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    restart: () => {
      boot = randomUUID();
      label = null;
    },
    bootId: () => boot,
  };
}

const sampling = { temperature: 1, topP: 1, maxTokens: 4 };

/** One campaign training episode of `turns` completions: the version it records, or its infrastructure cause. */
async function trainingEpisode(server: FakePolicyServer, version: number, turns = 2) {
  const request = { campaign: 'camp', purpose: 'train', config: { policy: { weight_version: version } } };
  const watch = new ServedWeightsWatch(weightExpectation(request)!);
  const endpoint: Endpoint = { baseUrl: server.baseUrl, model: 'm', servedWeights: watch };
  const served: (number | undefined)[] = [];
  try {
    for (let turn = 0; turn < turns; turn++)
      served.push((await completeTokens(endpoint, [1, 2], sampling)).servedVersion);
    return { recorded: watch.version(), served };
  } catch (err) {
    return { recorded: watch.version(), served, cause: (err as Error).message };
  }
}

test('a server that restarts on its own with base weights records no campaign version until synced again', async () => {
  const server = await fakePolicyServer();
  const label = weightLabel('camp', 3);
  const [synced] = await syncPolicyServers([{ baseUrl: server.baseUrl }], '/exports/step-3', label, 10_000);
  assert.equal(synced!.status, 'fulfilled');
  assert.equal(synced!.status === 'fulfilled' && synced!.value.bootId, server.bootId());

  assert.deepEqual(await trainingEpisode(server, 3), { recorded: 3, served: [3, 3] });

  server.restart();
  const lost = await trainingEpisode(server, 3);
  assert.equal(lost.recorded, undefined, 'nothing is recorded under the campaign version');
  assert.ok(lost.cause?.startsWith(SERVED_WEIGHTS_MISMATCH), lost.cause);
  assert.match(lost.cause!, new RegExp(`policy server ${server.baseUrl.replace(/\/v1$/, '')}`));
  assert.match(lost.cause!, /sampled with no labelled weights .*, not camp@3/);
  assert.match(lost.cause!, new RegExp(`boot ${server.bootId()}`));
  // Still base weights: every later episode fails the same way, none is recorded.
  assert.equal((await trainingEpisode(server, 3, 1)).recorded, undefined);

  const [again] = await syncPolicyServers([{ baseUrl: server.baseUrl }], '/exports/step-3', label, 10_000);
  assert.equal(again!.status, 'fulfilled');
  assert.deepEqual(await trainingEpisode(server, 3), { recorded: 3, served: [3, 3] });
});

test('a server without the header is read back after each completion', async () => {
  const server = await fakePolicyServer({ header: false });
  await syncPolicyServers([{ baseUrl: server.baseUrl }], '/exports/step-1', weightLabel('camp', 1), 10_000);
  assert.deepEqual(await trainingEpisode(server, 1, 1), { recorded: 1, served: [1] });
  server.restart();
  assert.match((await trainingEpisode(server, 1, 1)).cause ?? '', /served weights mismatch/);
});

test('what an episode expects: its campaign label, or for an evaluation the version under any label', () => {
  const train = weightExpectation({ campaign: 'c', purpose: 'train', config: { policy: { weight_version: 2 } } })!;
  assert.deepEqual(train, { version: 2, label: 'c@2' });
  assert.ok(!servedAsExpected(train, { label: 'other@2' }));
  assert.ok(!servedAsExpected(train, { label: null }));
  const evaluation = weightExpectation({ campaign: 'c', purpose: 'eval', config: { policy: { weight_version: 2 } } })!;
  assert.ok(servedAsExpected(evaluation, { label: 'c/eval-x@2' }));
  assert.ok(!servedAsExpected(evaluation, { label: 'loading:c@2' }));
  assert.ok(!servedAsExpected(evaluation, { label: 'mixed' }));
  assert.equal(weightExpectation({ purpose: 'adhoc', config: { policy: {} } }), undefined);
  assert.deepEqual(parseWeightLabel('a@b@12'), { owner: 'a@b', version: 12 });
  assert.equal(parseWeightLabel('loading:c@1'), undefined);
});

test('partial rollouts: a later version of the campaign may serve the episode, and it records the oldest', () => {
  const request = { campaign: 'c', purpose: 'train', config: { policy: { weight_version: 2, newer_weights: true } } };
  const expected = weightExpectation(request)!;
  assert.deepEqual(expected, { version: 2, label: 'c@2', newer: true });
  const watch = new ServedWeightsWatch(expected);
  assert.equal(watch.observe('s', { label: 'c@3' }), 3, 'interrupted by a sync: the next completion is on 3');
  assert.equal(watch.observe('s', { label: 'c@2' }), 2);
  assert.equal(watch.version(), 2, 'the oldest version that sampled it, which the staleness bound counts');
  assert.throws(() => watch.observe('s', { label: 'c@1' }), /served weights mismatch/, 'never an older one');
  assert.throws(() => new ServedWeightsWatch(expected).observe('s', { label: 'other@3' }), /mismatch/);
  const strict = weightExpectation({ ...request, config: { policy: { weight_version: 2 } } })!;
  assert.throws(() => new ServedWeightsWatch(strict).observe('s', { label: 'c@3' }), /mismatch/, 'off by default');
});

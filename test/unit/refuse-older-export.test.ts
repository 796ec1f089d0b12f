import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { BadInputError } from '../../core/errors.ts';
import { externalServersOnWeights, type PolicyWeights } from '../../learner-control/campaign-policy-weights.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * An evaluation of an older step against external policy servers (`refuseOlder`, set by the scheduled evaluation)
 * is refused with a BadInputError naming the versions when a server holds a newer version of the same campaign:
 * loading the older export would move the campaign's servers back under its episodes. A server on that version or
 * an older one, or on another campaign's weights, is brought to the step as before. Fake servers speak the weight
 * routes (GET /weight_info, the sync's pause, label and reload routes) and record every call.
 */

interface FakeServer {
  baseUrl: string;
  routes: string[];
  label: () => string | null;
}

const servers: http.Server[] = [];
after(() => servers.forEach((s) => s.close()));

async function fakeServer(held: string | null): Promise<FakeServer> {
  let label = held;
  const fake: FakeServer = { baseUrl: '', routes: [], label: () => label };
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', () => {
      const route = (req.url ?? '').split('?')[0]!;
      fake.routes.push(route);
      const body = (raw ? JSON.parse(raw) : {}) as { new_version?: string };
      if (route === '/update_weight_version') label = String(body.new_version);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(route === '/weight_info' ? { weight_version: label } : {}));
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return fake;
}

const campaignId = 'older-c';
/** The evaluation of step `step`'s export, as the scheduled evaluation asks for it. */
const want = (step: number, refuseOlder = true): PolicyWeights => ({
  campaignId,
  weightVersion: step,
  weightsPath: `/state/exports/step-${step}`,
  basePath: '/base-model',
  deadlineMs: 10_000,
  ...(refuseOlder ? { refuseOlder: true } : {}),
});
const loaded = (fake: FakeServer) => fake.routes.includes('/pause');

test('a server holding a newer version of the campaign is refused with both versions; nothing is loaded', async () => {
  const older = await fakeServer(`${campaignId}@2`);
  const newer = await fakeServer(`${campaignId}@5`);
  await assert.rejects(
    externalServersOnWeights(testTempDir('tbt-refuse-older-'), want(3), [older.baseUrl, newer.baseUrl]),
    (err: Error) => {
      assert.ok(err instanceof BadInputError, `${err.name}: a bad input, not retried`);
      assert.match(
        err.message,
        new RegExp(
          `policy server ${newer.baseUrl} holds campaign ${campaignId}'s weight version 5: evaluating step 3 ` +
            "would load an older export into the campaign's server",
        ),
      );
      return true;
    },
  );
  assert.ok(!loaded(older) && !loaded(newer), 'refused before any server was synced');
  assert.deepEqual([older.label(), newer.label()], [`${campaignId}@2`, `${campaignId}@5`]);
});

test("the same version is kept; an older one, none or another campaign's is brought to the step", async () => {
  const same = await fakeServer(`${campaignId}@3`);
  const older = await fakeServer(`${campaignId}@2`);
  const unlabelled = await fakeServer(null);
  const other = await fakeServer('another-campaign@9');
  const all = [same, older, unlabelled, other];
  await externalServersOnWeights(
    testTempDir('tbt-refuse-older-'),
    want(3),
    all.map((s) => s.baseUrl),
  );
  assert.ok(!loaded(same), 'a server on the step is not synced again');
  for (const s of [older, unlabelled, other]) assert.ok(loaded(s), `${s.baseUrl} synced`);
  assert.deepEqual(
    all.map((s) => s.label()),
    all.map(() => `${campaignId}@3`),
  );
});

test('without refuseOlder (the campaign catching its servers up) a newer server is synced back', async () => {
  const newer = await fakeServer(`${campaignId}@5`);
  await externalServersOnWeights(testTempDir('tbt-refuse-older-'), want(3, false), [newer.baseUrl]);
  assert.ok(loaded(newer));
  assert.equal(newer.label(), `${campaignId}@3`);
});

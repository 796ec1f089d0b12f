import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import {
  receiverWorkers,
  RECEIVER_PROTOCOL,
  syncPolicyServers,
  type CollectivePush,
} from '../../learner-control/policy-weight-sync.ts';

/**
 * The sync into several policy servers at once (learner-control/policy-weight-sync.ts), against fake servers that
 * speak vLLM's dev-mode routes: a collective push is one group spanning every worker of every server that has the
 * receiver (each server's workers get consecutive ranks after learner rank 0), a server whose receive fails, or
 * every server when the push fails, loads the disk export instead, and disk reloads run concurrently.
 */

interface FakeServer {
  baseUrl: string;
  calls: { route: string; body: Record<string, unknown>; at: number }[];
  reloads: { start: number; end: number }[];
}

interface FakeOptions {
  /** TP workers with the receiver; undefined = no receiver (the probe fails, as on the built-in server). */
  workers?: number;
  /** A worker's receive reports this error (a failed join, transport or load). */
  receiveError?: string;
  reloadMs?: number;
}

const servers: http.Server[] = [];
after(() => servers.forEach((s) => s.close()));

async function fakeServer(options: FakeOptions): Promise<FakeServer> {
  const fake: FakeServer = { baseUrl: '', calls: [], reloads: [] };
  let version: string | null = null;
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', async () => {
      const body = (raw ? JSON.parse(raw) : {}) as Record<string, unknown>;
      const route = (req.url ?? '').split('?')[0]!;
      fake.calls.push({
        route: route === '/collective_rpc' ? `rpc:${String(body.method)}` : route,
        body,
        at: Date.now(),
      });
      const send = (status: number, payload: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(payload));
      };
      if (route === '/weight_info') return send(200, { weight_version: version });
      if (route === '/update_weight_version') version = String(body.new_version);
      if (route !== '/collective_rpc') return send(200, {});
      const workers = options.workers;
      if (body.method === 'tbt_weight_transport') {
        if (workers === undefined) return send(400, { error: 'collective_rpc method is not supported' });
        const results = [...Array(workers).keys()].map((worker) => ({ protocol: RECEIVER_PROTOCOL, worker, workers }));
        return send(200, { results });
      }
      if (body.method === 'receive_tbt_weights') {
        const kwargs = body.kwargs as { base_rank: number; world_size: number };
        const results = [...Array(workers).keys()].map((worker) => ({
          rank: kwargs.base_rank + worker,
          world_size: kwargs.world_size,
          ...(options.receiveError && worker === 0 ? { error: options.receiveError } : {}),
        }));
        return send(200, { results });
      }
      if (body.method === 'reload_weights') {
        const start = Date.now();
        await new Promise((r) => setTimeout(r, options.reloadMs ?? 0));
        fake.reloads.push({ start, end: Date.now() });
        return send(200, { results: [null] });
      }
      send(400, { error: `unexpected ${String(body.method)}` });
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  fake.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return fake;
}

function fakePush(fail?: string): CollectivePush & { pushes: { port: number; worldSize: number; secret: string }[] } {
  const pushes: { port: number; worldSize: number; secret: string }[] = [];
  return {
    host: '127.0.0.1',
    timeoutS: 5,
    backend: 'gloo',
    pushes,
    push: async (_host, port, _timeoutS, worldSize, secret) => {
      pushes.push({ port, worldSize, secret });
      if (fail) throw new Error(fail);
      return {};
    },
  };
}

const routes = (s: FakeServer) => s.calls.map((c) => c.route);

test('one push spans every worker of every server with the receiver; the others load the export', async () => {
  const [a, b, c] = await Promise.all([fakeServer({ workers: 2 }), fakeServer({ workers: 1 }), fakeServer({})]);
  const push = fakePush();
  const results = await syncPolicyServers([a, b, c], '/exports/step-3', 'camp@3', 10_000, push);

  assert.deepEqual(push.pushes.length, 1);
  assert.equal(push.pushes[0]!.worldSize, 4); // learner rank 0 + 2 + 1 workers
  const kwargs = (s: FakeServer) => s.calls.find((x) => x.route === 'rpc:receive_tbt_weights')?.body.kwargs;
  assert.deepEqual(kwargs(a), {
    host: '127.0.0.1',
    port: push.pushes[0]!.port,
    timeout_s: 5,
    backend: 'gloo',
    base_rank: 1,
    world_size: 4,
    secret: push.pushes[0]!.secret,
  });
  assert.equal((kwargs(b) as { base_rank: number }).base_rank, 3);
  assert.equal(kwargs(c), undefined);

  const values = results.map((r) => (r.status === 'fulfilled' ? r.value : assert.fail(String(r.reason))));
  assert.deepEqual(
    values.map((v) => v.transport),
    ['collective', 'collective', 'disk'],
  );
  assert.match(values[2]!.fallback ?? '', /no collective receiver/);
  for (const s of [a, b]) assert.ok(!routes(s).includes('rpc:reload_weights'));
  assert.deepEqual(routes(c), [
    '/pause',
    '/update_weight_version',
    'rpc:tbt_weight_transport',
    'rpc:reload_weights',
    '/reset_prefix_cache',
    '/update_weight_version',
    '/weight_info',
    '/resume',
  ]);
  // Labelled as loading until the load succeeded; the label read back before the server serves again.
  const labels = c.calls.filter((x) => x.route === '/update_weight_version').map((x) => x.body.new_version);
  assert.deepEqual(labels, ['loading:camp@3', 'camp@3']);
  // Every server was paused before any receive began: the broadcast never meets a server still sampling.
  const lastPause = Math.max(...[a, b, c].map((s) => s.calls.find((x) => x.route === '/pause')!.at));
  const firstReceive = Math.min(...[a, b].map((s) => s.calls.find((x) => x.route === 'rpc:receive_tbt_weights')!.at));
  assert.ok(lastPause <= firstReceive);
});

test('third review, finding 8: a fresh secret per sync for the push and every receiver, in no result', async () => {
  const [a, b] = await Promise.all([fakeServer({ workers: 2 }), fakeServer({ workers: 1 })]);
  const push = fakePush();
  const first = await syncPolicyServers([a, b], '/exports/step-3', 'camp@3', 10_000, push);
  const again = await syncPolicyServers([a, b], '/exports/step-4', 'camp@4', 10_000, push);
  const secrets = push.pushes.map((p) => p.secret);
  assert.equal(secrets.length, 2);
  for (const secret of secrets) assert.match(secret, /^[0-9a-f]{64}$/);
  assert.notEqual(secrets[0], secrets[1], 'a fresh secret per sync');
  const given = [a, b].flatMap((s) =>
    s.calls
      .filter((x) => x.route === 'rpc:receive_tbt_weights')
      .map((x) => (x.body.kwargs as { secret: string }).secret),
  );
  assert.deepEqual(given.sort(), [secrets[0], secrets[0], secrets[1], secrets[1]].sort() as string[]);
  const results = JSON.stringify([...first, ...again]);
  for (const secret of secrets) assert.ok(!results.includes(secret), 'never in a result (a Temporal payload)');
});

test('a server whose receive fails loads the export; the others keep the pushed weights', async () => {
  const [a, b] = await Promise.all([
    fakeServer({ workers: 2 }),
    fakeServer({ workers: 2, receiveError: "load: RuntimeError('boom')" }),
  ]);
  const results = await syncPolicyServers([a, b], '/exports/step-4', 'camp@4', 10_000, fakePush());
  const values = results.map((r) => (r.status === 'fulfilled' ? r.value : assert.fail(String(r.reason))));
  assert.equal(values[0]!.transport, 'collective');
  assert.equal(values[1]!.transport, 'disk');
  assert.match(values[1]!.fallback ?? '', /rank 3: load: RuntimeError\('boom'\)/);
  assert.ok(routes(b).includes('rpc:reload_weights') && !routes(a).includes('rpc:reload_weights'));
});

test('a failed push sends every member to the export', async () => {
  const [a, b] = await Promise.all([fakeServer({ workers: 2 }), fakeServer({ workers: 1 })]);
  const results = await syncPolicyServers([a, b], '/exports/step-5', 'camp@5', 10_000, fakePush('store timeout'));
  for (const r of results) {
    assert.equal(r.status, 'fulfilled');
    if (r.status === 'fulfilled') {
      assert.equal(r.value.transport, 'disk');
      assert.match(r.value.fallback ?? '', /the learner's push failed: store timeout/);
    }
  }
});

test('disk reloads of several servers run at once, and one failing server does not fail the others', async () => {
  const fakes = await Promise.all([1, 2, 3].map(() => fakeServer({ reloadMs: 400 })));
  const started = Date.now();
  const results = await syncPolicyServers(
    [...fakes, { baseUrl: 'http://127.0.0.1:1/v1' }],
    '/exports/step-6',
    'camp@6',
    10_000,
  );
  const elapsed = Date.now() - started;
  assert.deepEqual(
    results.map((r) => r.status),
    ['fulfilled', 'fulfilled', 'fulfilled', 'rejected'],
  );
  const reloads = fakes.map((f) => f.reloads[0]!);
  // Overlapping windows: the last reload began before the first one ended.
  assert.ok(Math.max(...reloads.map((r) => r.start)) < Math.min(...reloads.map((r) => r.end)), JSON.stringify(reloads));
  assert.ok(elapsed < 3 * 400, `${elapsed} ms: the reloads ran one after another`);
});

test("the probe's per-worker answers give a server's receiving workers", () => {
  const worker = (w: number, n: number, protocol = RECEIVER_PROTOCOL) => ({ protocol, worker: w, workers: n });
  assert.equal(receiverWorkers({ results: [worker(1, 2), worker(0, 2)] }), 2);
  assert.match(String(receiverWorkers({ results: [{ protocol: 1 }] })), /protocol 1/);
  assert.match(String(receiverWorkers({ results: [worker(0, 2), worker(0, 2)] })), /not 0\.\.1/);
  assert.match(String(receiverWorkers({})), /no worker/);
});

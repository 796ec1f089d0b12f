import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readEnvironment } from '../../config/environment.ts';
import { workerKinds } from '../../infra/local-workers.ts';
import { metricsBindAddress, metricsPortOffsets } from '../../infra/worker-runtime.ts';

test('TBT_METRICS_PORT: orchestrator on the port, bookkeeping +1, rollout +2, gpu +3, loopback', () => {
  assert.deepEqual(
    workerKinds.map((kind) => metricsBindAddress('9464', kind)),
    ['127.0.0.1:9464', '127.0.0.1:9465', '127.0.0.1:9466', '127.0.0.1:9467'],
  );
  assert.deepEqual(Object.keys(metricsPortOffsets).sort(), [...workerKinds].sort(), 'a port for every worker kind');
});

test('TBT_METRICS_PORT=HOST:PORT binds that host; unset or empty is off', () => {
  assert.equal(metricsBindAddress('127.0.0.1:9000', 'rollout'), '127.0.0.1:9002');
  assert.equal(metricsBindAddress('[::1]:9000', 'gpu'), '[::1]:9003');
  assert.equal(metricsBindAddress(undefined, 'rollout'), undefined);
  assert.equal(metricsBindAddress('', 'orchestrator'), undefined);
});

test('the schema takes PORT, HOST:PORT or empty, and refuses what the rule cannot serve', () => {
  for (const good of ['9464', '127.0.0.1:9464', 'metrics.local:9464', '[::1]:9464', '', '65532'])
    assert.equal(readEnvironment({ TBT_METRICS_PORT: good }).TBT_METRICS_PORT, good, good);
  assert.equal(readEnvironment({}).TBT_METRICS_PORT, undefined);
  for (const bad of ['abc', '0', '65533', '9464:', 'http://x:9464', '1.2.3.4:', ' 9464'])
    assert.throws(() => readEnvironment({ TBT_METRICS_PORT: bad }), /environment variable TBT_METRICS_PORT: /, bad);
});

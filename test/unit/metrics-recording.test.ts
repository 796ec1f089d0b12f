import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import pino from 'pino';
import { infrastructureErrorClass } from '../../core/infrastructure-error-class.ts';
import { metrics, metricsEnabled } from '../../infra/metrics.ts';
import { installWorkerRuntime } from '../../infra/worker-runtime.ts';

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function recordOneOfEach(): void {
  metrics.episodeFinished({ outcome: 'success', purpose: 'train', seconds: 12.5 });
  metrics.episodeFinished({
    outcome: 'infrastructure_error',
    purpose: 'probe',
    seconds: 3,
    cause: 'judge unavailable: fetch failed',
  });
  metrics.sandboxAcquired('cold');
  metrics.sandboxWarmClones('tbt_tpl_x', 2);
  metrics.sandboxLeased(1);
  metrics.weightSynced(4.2, 'step', 'collective');
  metrics.learnerStepFinished(95, false);
}

test('metrics off: the helpers do nothing; on: the same calls reach the worker metrics port', async () => {
  assert.equal(metricsEnabled(), false);
  recordOneOfEach(); // before the runtime: no-ops (counted below: each counter must read 1, not 2)

  const port = await freePort();
  const address = installWorkerRuntime(pino({ level: 'silent' }), 'gpu', { TBT_METRICS_PORT: `127.0.0.1:${port - 3}` });
  assert.equal(address, `127.0.0.1:${port}`);
  assert.equal(metricsEnabled(), true);
  recordOneOfEach();

  let text = '';
  for (let i = 0; i < 20 && !text.includes('tbt_learner_step_seconds_count'); i++) {
    text = await (await fetch(`http://${address}/metrics`)).text();
    if (!text.includes('tbt_learner_step_seconds_count')) await new Promise((r) => setTimeout(r, 100));
  }
  const lines = text.split('\n');
  for (const series of [
    'tbt_episodes_finished_total{outcome="success",purpose="train",tbt_worker="gpu"} 1',
    'tbt_episodes_finished_total{outcome="infrastructure_error",purpose="probe",tbt_worker="gpu"} 1',
    'tbt_infrastructure_errors_total{class="judge",purpose="probe",tbt_worker="gpu"} 1',
    'tbt_episode_duration_seconds_bucket{outcome="success",purpose="train",tbt_worker="gpu",le="10"} 0',
    'tbt_episode_duration_seconds_bucket{outcome="success",purpose="train",tbt_worker="gpu",le="20"} 1',
    'tbt_sandbox_acquired_total{source="cold",tbt_worker="gpu"} 1',
    'tbt_sandbox_warm_clones{template="tbt_tpl_x",tbt_worker="gpu"} 2',
    'tbt_sandbox_leased{tbt_worker="gpu"} 1',
    'tbt_weight_sync_seconds_sum{reason="step",transport="collective",tbt_worker="gpu"} 4.2',
    'tbt_learner_step_seconds_count{repeated="false",tbt_worker="gpu"} 1',
  ])
    assert.ok(lines.includes(series), `${series}\n--- got:\n${text}`);
  assert.ok(!/^tbt_infrastructure_errors_total\{class="other"/m.test(text), 'a success is no infrastructure error');
});

test('infrastructure error classes: a fixed set read from the recorded cause', () => {
  const cases: [string | undefined, string][] = [
    ['no answer from tool before the episode deadline', 'deadline'],
    ['test tests/x.py did not finish within 3000 ms', 'deadline'],
    ['policy server token completion: HTTP 500: oops', 'policy_server'],
    ['policy chat completion failed: Connection error.', 'policy_server'],
    ['token anchor mismatch at position 3: the chat template renders ...', 'policy_server'],
    ['judge unavailable: 503', 'judge'],
    ['sandbox acquire failed: connection refused', 'sandbox'],
    ['cannot read the state of tbt_sbx_1: terminated', 'sandbox'],
    ["tool server 'search': search failed: ECONNRESET", 'tool_server'],
    ['tool add_todo: socket hang up', 'tool_server'],
    ['control database: Connection terminated', 'control_database'],
    ['unexpected error: x is not a function', 'unexpected'],
    ['something new', 'other'],
    [undefined, 'other'],
  ];
  assert.deepEqual(
    cases.map(([cause]) => infrastructureErrorClass(cause)),
    cases.map(([, cls]) => cls),
  );
});

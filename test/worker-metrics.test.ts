import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import { metricsPortOffsets } from '../infra/worker-runtime.ts';
import { loadNativeSuites, type LoadedTask } from '../task-suites/task-suite-loader.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { OpenAIWireProtocolDouble, type ChatRequestBody, type DoubleReply } from './helpers/openai-wire-double.ts';
import { controlReady, env, temporalClient, workflowBundle } from './helpers/stack.ts';

/**
 * A rollout worker as production runs it (workers/rollout-worker.ts, its own OS process) with TBT_METRICS_PORT
 * set: three episodes of the tiny suite run through it (one passes, one fails as the agent's doing, one meets a
 * broken policy server), then its metrics port is read as Prometheus would: the SDK's `temporal_` series and
 * ours, with the counts those three episodes must have left.
 */

const prefix = `test-metrics-${randomUUID().slice(0, 8)}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const tinySuite = path.join(repoRoot, 'tasks', 'tiny');
const activityTaskQueue = 2; // temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY

let worker: { child: ChildProcess; output: string[]; exited: Promise<unknown> } | undefined;
let policy: OpenAIWireProtocolDouble | undefined;

/** A port nothing listens on now (the kernel's choice), above the offset the rollout worker adds. */
async function freePort(): Promise<number> {
  for (;;) {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    if (port > 1024 + metricsPortOffsets.rollout) return port;
  }
}

function stopWorker(signal: NodeJS.Signals): Promise<unknown> | undefined {
  if (!worker || worker.child.exitCode !== null || worker.child.signalCode !== null) return undefined;
  worker.child.kill(signal);
  return worker.exited;
}
process.once('exit', () => void stopWorker('SIGKILL'));

const diagnostics = () => `--- rollout worker output:\n${worker?.output.join('').slice(-3000) ?? ''}`;

/**
 * The policy: the passing task's golden calls, "Done" at once for the failing one (an agent failure), an HTTP 400
 * that is no context overflow for the broken one (an infrastructure error of class policy_server).
 */
function reply(tasks: { passing: LoadedTask; failing: LoadedTask; broken: LoadedTask }, body: ChatRequestBody) {
  const firstUser = body.messages.find((m) => m.role === 'user')?.content ?? '';
  const task = Object.values(tasks)
    .filter((t) => firstUser.includes(t.query))
    .sort((a, b) => b.query.length - a.query.length)[0];
  if (task === tasks.broken) return { status: 400, body: { error: { message: 'the policy is broken' } } };
  if (task !== tasks.passing) return { content: 'Done <DONE>' };
  const next = task.golden[body.messages.filter((m) => m.role === 'tool').length];
  const call = next && `<tool_call>\n${JSON.stringify({ name: next.tool, arguments: next.arguments })}\n</tool_call>`;
  return { content: call || 'Done <DONE>' } satisfies DoubleReply;
}

/** The value of one series of the exposition text, found by name and labels (any order, others allowed). */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}

before(async () => {
  await controlReady();
});

after(async () => {
  await stopWorker('SIGKILL');
  await policy?.stop();
});

test('a rollout worker serves the SDK metrics and ours on its metrics port', { timeout: 120_000 }, async () => {
  const { suites, problems } = loadNativeSuites(tinySuite);
  assert.deepEqual(problems, []);
  const todo = suites[0]!.tasks.filter((task) => task.scenario === 'todo');
  const [passing, failing, broken] = todo;
  assert.ok(passing && failing && broken, 'the tiny suite has three todo tasks');

  policy = new OpenAIWireProtocolDouble((body) => reply({ passing, failing, broken }, body));
  const config = episodeConfigSchema.parse({
    policy: { base_url: await policy.start(), model: 'policy-double', timeout_ms: 15_000 },
    limits: { max_agent_turns: 4, wall_clock_ms: 60_000 },
  });

  const port = await freePort();
  const metricsSetting = `127.0.0.1:${port - metricsPortOffsets.rollout}`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'workers/rollout-worker.ts'], {
    cwd: repoRoot,
    env: { ...process.env, TBT_TASK_QUEUE_PREFIX: prefix, TBT_SANDBOX_WARM: '1', TBT_METRICS_PORT: metricsSetting },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  for (const stream of [child.stdout!, child.stderr!]) stream.on('data', (c: Buffer) => output.push(c.toString()));
  worker = { child, output, exited: new Promise((resolve) => child.once('exit', resolve)) };

  const { client, connection } = await temporalClient();
  const workerConnection = await NativeConnection.connect({ address: temporalAddress(env) });
  try {
    const deadline = Date.now() + 45_000;
    for (;;) {
      const { pollers } = await connection.workflowService.describeTaskQueue({
        namespace: env.TBT_TEMPORAL_NAMESPACE,
        taskQueue: { name: queues.rollout },
        taskQueueType: activityTaskQueue,
      });
      if (pollers.some((p) => p.identity === `${child.pid}@${os.hostname()}`)) break;
      if (child.exitCode !== null) assert.fail(`the rollout worker exited before polling\n${diagnostics()}`);
      if (Date.now() > deadline) assert.fail(`the rollout worker is not polling after 45 s\n${diagnostics()}`);
      await new Promise((r) => setTimeout(r, 250));
    }

    const episodes: EpisodeActivityInput[] = [passing, failing, broken].map((task, i) => ({
      episodeId: `${prefix}/episode-${i}`,
      suiteDir: tinySuite,
      taskUid: task.uid,
      purpose: 'adhoc',
      config,
    }));
    const orchestrator = await Worker.create({
      connection: workerConnection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: queues.orchestrator,
      workflowBundle: await workflowBundle(),
    });
    const summaries = await orchestrator.runUntil(
      client.workflow.execute(episodeBatchWorkflow, {
        taskQueue: queues.orchestrator,
        workflowId: `${prefix}/batch`,
        args: [{ rolloutQueue: queues.rollout, episodes, concurrency: 1 }],
      }),
    );
    assert.deepEqual(
      summaries.map((s) => s.outcome),
      ['success', 'agent_failure', 'infrastructure_error'],
      diagnostics(),
    );

    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    assert.equal(response.status, 200);
    const text = await response.text();
    const ours = { tbt_worker: 'rollout', purpose: 'adhoc' };
    assert.equal(sample(text, 'tbt_episodes_finished_total', { ...ours, outcome: 'success' }), 1, text);
    assert.equal(sample(text, 'tbt_episodes_finished_total', { ...ours, outcome: 'agent_failure' }), 1);
    assert.equal(sample(text, 'tbt_episodes_finished_total', { ...ours, outcome: 'infrastructure_error' }), 1);
    assert.equal(sample(text, 'tbt_infrastructure_errors_total', { ...ours, class: 'policy_server' }), 1);
    assert.equal(sample(text, 'tbt_episode_duration_seconds_count', { ...ours, outcome: 'success' }), 1);
    const acquired =
      (sample(text, 'tbt_sandbox_acquired_total', { source: 'warm' }) ?? 0) +
      (sample(text, 'tbt_sandbox_acquired_total', { source: 'cold' }) ?? 0);
    assert.equal(acquired, 3, 'one sandbox per episode');
    // The SDK's own series, from the same exporter: three activities completed on the rollout queue.
    const sdk = { tbt_worker: 'rollout', task_queue: queues.rollout, activity_type: 'runEpisode' };
    assert.equal(sample(text, 'temporal_activity_execution_latency_count', sdk), 3, 'SDK activity latency');
    assert.ok(sample(text, 'temporal_worker_task_slots_available', { tbt_worker: 'rollout' }) !== undefined);
  } finally {
    await stopWorker('SIGTERM');
    await workerConnection.close();
    await connection.close();
  }
});

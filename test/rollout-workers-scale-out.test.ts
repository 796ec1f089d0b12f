import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import { loadNativeSuites, type LoadedTask } from '../task-suites/task-suite-loader.ts';
import { withClient } from '../infra/control-database.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { OpenAIWireProtocolDouble, type ChatRequestBody, type DoubleReply } from './helpers/openai-wire-double.ts';
import { controlReady, env, temporalClient, workflowBundle } from './helpers/stack.ts';

/**
 * Scale-out as production runs it: two rollout workers as separate OS processes (workers/rollout-worker.ts)
 * poll one rollout task queue; an episode batch started on the orchestrator queue is spread over both.
 * The policy is an OpenAI wire-protocol test double that answers each task's golden call, slowly enough
 * (200 ms a reply) that neither worker can take every episode alone.
 */

const prefix = `test-scale-${randomUUID().slice(0, 8)}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const tinySuite = path.join(repoRoot, 'tasks', 'tiny');
const activityTaskQueue = 2; // temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY

interface RolloutProcess {
  child: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
}
const workers: RolloutProcess[] = [];
let policy: OpenAIWireProtocolDouble | undefined;

function startRolloutWorker(): RolloutProcess {
  // `node --import tsx` rather than the tsx launcher, which runs the script in a child process: this way the
  // pid we hold is the worker's own, the one its episodes report as host:pid.
  const child = spawn(process.execPath, ['--import', 'tsx', 'workers/rollout-worker.ts'], {
    cwd: repoRoot,
    // Metrics off: two workers on one host would both bind TBT_METRICS_PORT + 2.
    env: {
      ...process.env,
      TBT_TASK_QUEUE_PREFIX: prefix,
      TBT_ROLLOUT_CONCURRENCY: '1',
      TBT_SANDBOX_WARM: '1',
      TBT_METRICS_PORT: '',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const keep = (chunk: Buffer) => {
    output.push(chunk.toString());
    if (output.length > 200) output.shift();
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const worker = { child, output, exited };
  workers.push(worker);
  return worker;
}

async function stopRolloutWorkers(): Promise<void> {
  await Promise.all(
    workers.map(async ({ child, exited }) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM'); // graceful: the worker drains, then closes its sandbox pool
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }),
  );
}

function killRolloutWorkersNow(): void {
  for (const { child } of workers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
process.once('exit', killRolloutWorkersNow);

function diagnostics(): string {
  return workers
    .map(
      (w, i) =>
        `--- rollout worker ${i} (pid ${w.child.pid}, exit ` +
        `${w.child.exitCode ?? w.child.signalCode ?? 'running'}):\n${w.output.join('').slice(-3000)}`,
    )
    .join('\n');
}

const call = (name: string, args: unknown) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

/** The golden call the conversation has not made yet, or the closing message once all are made. */
function goldenReply(tasks: LoadedTask[], body: ChatRequestBody): DoubleReply {
  const firstUser = body.messages.find((m) => m.role === 'user')?.content ?? '';
  const task = tasks.filter((t) => firstUser.includes(t.query)).sort((a, b) => b.query.length - a.query.length)[0];
  if (!task)
    return {
      status: 400,
      body: { error: { message: `no tiny/todo task matches the first user message: ${firstUser.slice(0, 200)}` } },
    };
  const next = task.golden[body.messages.filter((m) => m.role === 'tool').length];
  return { content: next ? call(next.tool, next.arguments) : 'Done <DONE>', delayMs: 200 };
}

before(async () => {
  await controlReady();
});

after(async () => {
  await stopRolloutWorkers();
  await policy?.stop();
});

test(
  'two rollout worker processes share one episode batch, and every episode succeeds',
  { timeout: 90_000 },
  async (t) => {
    t.signal.addEventListener('abort', killRolloutWorkersNow, { once: true });
    const { suites, problems } = loadNativeSuites(tinySuite);
    assert.deepEqual(problems, []);
    const todo = suites[0]!.tasks.filter((task) => task.scenario === 'todo');
    assert.ok(todo.length >= 8, 'the tiny suite has 8 todo tasks');

    policy = new OpenAIWireProtocolDouble((body) => goldenReply(todo, body));
    const policyUrl = await policy.start();
    const config = episodeConfigSchema.parse({
      policy: { base_url: policyUrl, model: 'policy-double', timeout_ms: 15_000 },
      limits: { max_agent_turns: 4, wall_clock_ms: 60_000 },
    });

    const first = startRolloutWorker();
    const second = startRolloutWorker();
    const bundle = workflowBundle();
    const { client, connection } = await temporalClient();
    const workerConnection = await NativeConnection.connect({ address: temporalAddress(env) });
    try {
      // Start the batch only once both processes poll the rollout queue, so both can be handed episodes.
      const expectedIdentities = [first, second].map((w) => `${w.child.pid}@${os.hostname()}`);
      const pollDeadline = Date.now() + 45_000;
      for (;;) {
        const { pollers } = await connection.workflowService.describeTaskQueue({
          namespace: env.TBT_TEMPORAL_NAMESPACE,
          taskQueue: { name: queues.rollout },
          taskQueueType: activityTaskQueue,
        });
        const polling = new Set(pollers.map((p) => p.identity));
        if (expectedIdentities.every((id) => polling.has(id))) break;
        const dead = workers.find((w) => w.child.exitCode !== null);
        if (dead) assert.fail(`a rollout worker exited before polling\n${diagnostics()}`);
        if (Date.now() > pollDeadline)
          assert.fail(
            `rollout workers not polling ${queues.rollout} after 45 s (pollers: ` +
              `${[...polling].join(', ') || 'none'})\n${diagnostics()}`,
          );
        await new Promise((r) => setTimeout(r, 250));
      }

      const episodes: EpisodeActivityInput[] = todo.slice(0, 8).map((task, i) => ({
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
        workflowBundle: await bundle,
      });
      const summaries = await orchestrator.runUntil(
        client.workflow.execute(episodeBatchWorkflow, {
          taskQueue: queues.orchestrator,
          workflowId: `${prefix}/batch`,
          args: [{ rolloutQueue: queues.rollout, episodes, concurrency: episodes.length }],
        }),
      );

      assert.equal(summaries.length, 8);
      const failed = summaries.filter((s) => s.outcome !== 'success' || s.reward !== 1);
      assert.deepEqual(failed, [], `every episode succeeds\n${diagnostics()}`);
      const ranOn = new Set(summaries.map((s) => s.worker));
      assert.deepEqual(
        [...ranOn].sort(),
        [first, second].map((w) => `${os.hostname()}:${w.child.pid}`).sort(),
        'episodes ran on exactly the two rollout worker processes',
      );

      const stored = await withClient(await controlReady(), (c) =>
        c.query<{ status: string; n: string }>(
          `SELECT status, count(*) AS n FROM episodes WHERE id LIKE $1 GROUP BY status`,
          [`${prefix}/%`],
        ),
      );
      assert.deepEqual(
        stored.rows.map((r) => [r.status, Number(r.n)]),
        [['success', 8]],
        'each episode stored once, finished',
      );
    } finally {
      await stopRolloutWorkers();
      await workerConnection.close();
      await connection.close();
    }
  },
);

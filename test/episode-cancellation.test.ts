import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createEpisodeActivities, type EpisodeActivityInput } from '../activities/episode-activities.ts';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { withClient } from '../infra/control-database.ts';
import { episodeHeartbeatMs } from '../rollout/episode-recording.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { SlowOpenAIEndpoint } from './helpers/episode-cancellation-endpoint.ts';
import { controlReady, env, newPool, temporalClient, workflowBundle } from './helpers/stack.ts';

/**
 * An abandoned episode on the real stack (Temporal, Postgres sandboxes, the real episode activity): its workflow is
 * cancelled or terminated while the policy (a slow OpenAI wire-protocol double, 2 minutes a reply) generates. The
 * attempt hears of it at its next heartbeat and stops within seconds: the policy request is aborted, the sandbox
 * dropped, and nothing is stored as a result. The worker lets a heartbeat through every `episodeHeartbeatMs`, as the
 * rollout worker must (with the SDK's default throttle, an episode hears of it up to a minute later). A rollout worker
 * shutting down cancels its episodes the same way once its grace time is over, and Temporal retries them elsewhere.
 */

const prefix = `test-cancel-${randomUUID().slice(0, 8)}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const tinySuite = path.join(repoRoot, 'tasks', 'tiny');
/** Heartbeat, plus the server's answer and the sandbox drop, on a loaded machine. */
const stopsWithinMs = episodeHeartbeatMs + 7_000;

let policy: SlowOpenAIEndpoint;
let policyUrl: string;
let pool: SandboxPool;
let controlUrl: string;
let connection: NativeConnection;
let workers: Worker[] = [];
let running: Promise<unknown>;

before(async () => {
  controlUrl = await controlReady();
  policy = new SlowOpenAIEndpoint(120_000);
  policyUrl = await policy.start();
  pool = newPool({ warm: 0 });
  connection = await NativeConnection.connect({ address: temporalAddress(env) });
  workers = [
    await rolloutWorker(queues.rollout),
    await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: queues.orchestrator,
      workflowBundle: await workflowBundle(),
    }),
  ];
  running = Promise.all(workers.map((w) => w.run()));
});

after(async () => {
  for (const w of workers) w.shutdown();
  await running;
  await connection?.close();
  await pool?.close();
  await policy?.stop();
});

function rolloutWorker(taskQueue: string, options: { shutdownGraceTime?: string } = {}): Promise<Worker> {
  return Worker.create({
    connection,
    namespace: env.TBT_TEMPORAL_NAMESPACE,
    taskQueue,
    activities: createEpisodeActivities({ pool, grader: new TerminalStateGrader(pool, controlUrl), controlUrl }),
    // As the rollout worker: heartbeats (and so cancellations) go through as often as the episode sends them.
    maxHeartbeatThrottleInterval: episodeHeartbeatMs,
    ...options,
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(100);
  }
}

async function sandboxesOf(episodeId: string): Promise<number> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ n: string }>(`SELECT count(*) AS n FROM sandboxes WHERE owner = $1`, [`episode:${episodeId}`]),
  );
  return Number(rows[0]!.n);
}

/**
 * Starts one episode, waits until its policy request is in flight, abandons it with `end`, checks the stop, then
 * hands the workflow to `then`. Returns the seconds from `end` to the stop.
 */
async function abandonMidEpisode(
  name: string,
  end: (handle: WorkflowHandle) => Promise<unknown>,
  options: { rolloutQueue?: string; then?: (handle: WorkflowHandle) => Promise<void> } = {},
): Promise<number> {
  const episodeId = `${prefix}/${name}`;
  const config = episodeConfigSchema.parse({
    policy: { base_url: policyUrl, model: 'slow-double', timeout_ms: 300_000 },
    limits: { max_agent_turns: 4, wall_clock_ms: 600_000 },
  });
  const episode: EpisodeActivityInput = {
    episodeId,
    suiteDir: tinySuite,
    taskUid: 'tiny/todo/complete-2',
    purpose: 'adhoc',
    config,
  };
  const { client, connection: clientConnection } = await temporalClient();
  try {
    const handle = await client.workflow.start(episodeBatchWorkflow, {
      taskQueue: queues.orchestrator,
      workflowId: `${prefix}/${name}-batch`,
      args: [{ rolloutQueue: options.rolloutQueue ?? queues.rollout, episodes: [episode], concurrency: 1 }],
    });
    const before = policy.requests.length;
    await until('the policy request', async () => (policy.requests.length > before ? true : undefined), 60_000);
    const request = policy.requests[before]!;
    assert.equal(await sandboxesOf(episodeId), 1, 'the episode holds its sandbox while the policy generates');
    // Past its first heartbeat, which the SDK sends at once: later ones go out at most once per throttle interval.
    await delay(episodeHeartbeatMs * 1.5);

    const endedAt = Date.now();
    await end(handle);
    await until('the policy request to be aborted', async () => request.abortedAt, stopsWithinMs);
    const dropped = async () => ((await sandboxesOf(episodeId)) === 0 ? true : undefined);
    await until('the sandbox to be dropped', dropped, 3000);
    const seconds = (Date.now() - endedAt) / 1000;
    assert.ok(seconds * 1000 < stopsWithinMs, `stopped ${seconds} s after its workflow ended`);

    const { rows } = await withClient(controlUrl, (c) =>
      c.query<{ status: string; hasRecord: boolean }>(
        `SELECT status, record IS NOT NULL AS "hasRecord" FROM episodes WHERE id = $1`,
        [episodeId],
      ),
    );
    assert.deepEqual(rows, [{ status: 'running', hasRecord: false }], 'nothing stored: an interrupted episode');
    await options.then?.(handle);
    return seconds;
  } finally {
    await clientConnection.close();
  }
}

test('a cancelled workflow: the episode stops within seconds, aborts its request, drops its sandbox', async (t) => {
  t.diagnostic(`stopped ${await abandonMidEpisode('cancelled', (handle) => handle.cancel())} s after the cancel`);
});

test('a terminated workflow: its episode hears of it at the next heartbeat and stops the same way', async (t) => {
  const seconds = await abandonMidEpisode('terminated', (handle) => handle.terminate('test: abandoned episode'));
  t.diagnostic(`stopped ${seconds} s after the termination`);
});

test('a rollout worker shutting down: its episode stops after the grace time and is retried elsewhere', async (t) => {
  const rolloutQueue = `${queues.rollout}-shutdown`;
  const leaving = await rolloutWorker(rolloutQueue, { shutdownGraceTime: '1s' });
  const leavingRun = leaving.run();
  const seconds = await abandonMidEpisode('worker-shutdown', async () => leaving.shutdown(), {
    rolloutQueue,
    async then(handle) {
      await leavingRun;
      const staying = await rolloutWorker(rolloutQueue);
      const stayingRun = staying.run();
      try {
        const before = policy.requests.length;
        await until('the retry', async () => (policy.requests.length > before ? true : undefined), 30_000);
        const { raw } = await handle.describe();
        assert.equal(raw.pendingActivities?.[0]?.attempt, 2, 'the second attempt runs it again');
        await handle.cancel();
        await until('the retry to stop', async () => policy.requests[before]!.abortedAt, stopsWithinMs);
      } finally {
        staying.shutdown();
        await stayingRun;
      }
    },
  });
  t.diagnostic(`stopped ${seconds} s after the shutdown began (grace time 1 s)`);
});

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { defaultPayloadConverter } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createEpisodeActivities, type EpisodeActivityInput } from '../activities/episode-activities.ts';
import { episodeInfrastructureErrorType } from '../activities/temporal-failure.ts';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { withClient } from '../infra/control-database.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { controlReady, env, newPool, temporalClient, workflowBundle } from './helpers/stack.ts';

/**
 * The real episode activity against a policy endpoint that is down: the episode is stored as an infrastructure
 * error, its one attempt fails (not retried) with type EpisodeInfrastructureError, the error's class and cause as
 * message and the stored summary as details, and the workflow receives that summary as its result.
 */

const prefix = `test-failed-attempt-${randomUUID().slice(0, 8)}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });

let pool: SandboxPool;
let controlUrl: string;
let connection: NativeConnection;
let workers: Worker[] = [];
let running: Promise<unknown>;

before(async () => {
  controlUrl = await controlReady();
  pool = newPool({ warm: 0 });
  connection = await NativeConnection.connect({ address: temporalAddress(env) });
  workers = [
    await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: queues.rollout,
      activities: createEpisodeActivities({ pool, grader: new TerminalStateGrader(pool, controlUrl), controlUrl }),
    }),
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
});

/** A local address nothing listens on (a server bound, then closed). */
async function deadEndpoint(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/v1`;
}

test('policy down: the episode is stored, its one attempt fails with its class, the workflow has it', async () => {
  const episodeId = `${prefix}/down`;
  const episode: EpisodeActivityInput = {
    episodeId,
    suiteDir: path.join(repoRoot, 'tasks', 'tiny'),
    taskUid: 'tiny/todo/complete-2',
    purpose: 'adhoc',
    config: episodeConfigSchema.parse({
      policy: { base_url: await deadEndpoint(), model: 'nobody', timeout_ms: 10_000 },
      limits: { max_agent_turns: 2, wall_clock_ms: 60_000 },
    }),
  };
  const { client, connection: clientConnection } = await temporalClient();
  try {
    const handle = await client.workflow.start(episodeBatchWorkflow, {
      taskQueue: queues.orchestrator,
      workflowId: `${prefix}/batch`,
      args: [{ rolloutQueue: queues.rollout, episodes: [episode], concurrency: 1 }],
    });
    const [summary] = await handle.result();
    assert.equal(summary?.id, episodeId);
    assert.equal(summary.outcome, 'infrastructure_error');
    assert.match(summary.cause ?? '', /^policy chat completion failed: /);

    const { rows } = await withClient(controlUrl, (c) =>
      c.query<{ status: string; cause: string }>(`SELECT status, cause FROM episodes WHERE id = $1`, [episodeId]),
    );
    assert.deepEqual(rows, [{ status: 'infrastructure_error', cause: summary.cause }], 'stored as before');

    const events = (await handle.fetchHistory()).events ?? [];
    const started = events.filter((e) => e.activityTaskStartedEventAttributes);
    assert.deepEqual(
      started.map((e) => e.activityTaskStartedEventAttributes!.attempt),
      [1],
      'one attempt: Temporal does not retry it',
    );
    const failed = events.flatMap((e) => e.activityTaskFailedEventAttributes ?? []);
    assert.equal(failed.length, 1, 'the attempt shows as failed, not completed');
    const failure = failed[0]!.failure!;
    assert.equal(failure.applicationFailureInfo?.type, episodeInfrastructureErrorType);
    assert.equal(failure.applicationFailureInfo?.nonRetryable, true);
    assert.equal(failure.message, `policy_server: ${summary.cause}`);
    const details = failure.applicationFailureInfo?.details?.payloads ?? [];
    assert.deepEqual(
      details.map((p) => defaultPayloadConverter.fromPayload(p)),
      [summary],
      'the stored summary',
    );
  } finally {
    await clientConnection.close();
  }
});

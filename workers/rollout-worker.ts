import os from 'node:os';
import { Worker } from '@temporalio/worker';
import { databaseUrl, readEnvironment, taskQueues } from '../config/environment.ts';
import { createEpisodeActivities } from '../activities/episode-activities.ts';
import { thinkingboxResourcesFactory } from '../rollout/thinkingbox-resources.ts';
import { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { createServiceLogger, exitWithCrash } from '../infra/service-logger.ts';
import { installWorkerRuntime } from '../infra/worker-runtime.ts';
import { forwardTypesense } from '../infra/typesense-standin.ts';
import { connectTemporalWorker } from '../infra/temporal-connection.ts';
import { episodeHeartbeatMs } from '../rollout/episode-recording.ts';

/**
 * Rollout worker: runs episodes (CPU activities) from the shared rollout task queue. Start as many as you
 * like, on as many hosts as you like: Temporal spreads episodes across every worker polling the queue.
 * Concurrency: TBT_ROLLOUT_CONCURRENCY (default 4) episodes at once per worker; on SIGTERM it drains them for
 * TBT_ROLLOUT_DRAIN_S (default 30 s).
 */

const log = createServiceLogger('rollout-worker', { host: os.hostname() });

async function run(): Promise<void> {
  const env = readEnvironment();
  // Activity and worker logs (Temporal's `log`) go through this logger; metrics when TBT_METRICS_PORT is set.
  installWorkerRuntime(log, 'rollout', env);
  const controlUrl = databaseUrl(env);
  await ensureControlDatabase(env);
  const pool = new SandboxPool({
    controlUrl,
    agentPassword: env.TBT_AGENT_DB_PASSWORD,
    readerPassword: env.TBT_READER_DB_PASSWORD,
    recycle: env.TBT_SANDBOX_RECYCLE,
    warm: env.TBT_SANDBOX_WARM,
  });
  const swept = await pool.sweep();
  if (swept.dropped.length) log.info({ dropped: swept.dropped.length }, 'swept sandboxes left by crashed workers');
  const sweeper = setInterval(
    () => pool.sweep().catch((err: unknown) => log.warn({ err }, 'sandbox sweep failed')),
    5 * 60_000,
  );
  const connection = await connectTemporalWorker(env);
  const thinkingbox = thinkingboxResourcesFactory(); // tool servers of imported ThinkingBox tasks, on first use
  // Dataset tool servers call Typesense at 127.0.0.1:8108; in a container that is the compose service.
  if (env.TBT_TYPESENSE_ADDRESS) await forwardTypesense(env.TBT_TYPESENSE_ADDRESS);
  try {
    const worker = await Worker.create({
      connection,
      namespace: env.TBT_TEMPORAL_NAMESPACE,
      taskQueue: taskQueues(env).rollout,
      activities: createEpisodeActivities({
        pool,
        grader: new TerminalStateGrader(pool, controlUrl),
        controlUrl,
        thinkingbox,
      }),
      maxConcurrentActivityTaskExecutions: env.TBT_ROLLOUT_CONCURRENCY,
      // SIGTERM: stop polling, let running episodes finish within the drain, then cancel the rest, which Temporal
      // retries on another worker (the episode id keeps it exactly once).
      shutdownGraceTime: env.TBT_ROLLOUT_DRAIN_S * 1000,
      // A cancellation reaches an episode only as the answer to a heartbeat: send them as often as it beats (the
      // SDK's default throttle sends one a minute at most), so an abandoned episode frees its sandbox in seconds.
      maxHeartbeatThrottleInterval: episodeHeartbeatMs,
    });
    log.info({ taskQueue: taskQueues(env).rollout }, 'rollout worker started');
    await worker.run();
  } finally {
    clearInterval(sweeper);
    await thinkingbox.close();
    await pool.close();
    await connection.close();
  }
}

run().catch((err: unknown) => exitWithCrash(log, 'rollout worker', err));

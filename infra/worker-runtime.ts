import { Runtime } from '@temporalio/worker';
import type pino from 'pino';
import type { Environment } from '../config/environment.ts';
import type { WorkerKind } from './local-workers.ts';
import { enableMetrics, metricBuckets } from './metrics.ts';
import { PinoTemporalLogger } from './temporal-pino-logger.ts';

/**
 * The Temporal runtime of a worker process, installed once before its worker is created: the SDK's logger routed
 * into pino and, when TBT_METRICS_PORT is set, the SDK's Prometheus exporter, which serves the SDK's metrics and
 * ours (infra/metrics.ts) on one port per worker kind.
 */

/** The port rule: TBT_METRICS_PORT is the orchestrator's, each other kind the next one (docs/metrics.md). */
export const metricsPortOffsets: Record<WorkerKind, number> = { orchestrator: 0, bookkeeping: 1, rollout: 2, gpu: 3 };

/**
 * `PORT` or `HOST:PORT` (the schema checked it) into the exporter's bind address for `kind`; undefined = off.
 * The exporter has no authentication: without a host it binds loopback only, and only a host the operator names
 * (`0.0.0.0:PORT` for compose's network or Prometheus on another host) opens it to other machines.
 */
export function metricsBindAddress(setting: string | undefined, kind: WorkerKind): string | undefined {
  if (!setting) return undefined;
  const split = setting.lastIndexOf(':');
  const host = split < 0 ? '127.0.0.1' : setting.slice(0, split);
  return `${host}:${Number(setting.slice(split + 1)) + metricsPortOffsets[kind]}`;
}

/** Installs the runtime; returns the metrics address when metrics are on. A port in use stops the worker. */
export function installWorkerRuntime(
  logger: pino.Logger,
  kind: WorkerKind,
  env: Pick<Environment, 'TBT_METRICS_PORT'>,
): string | undefined {
  const bindAddress = metricsBindAddress(env.TBT_METRICS_PORT, kind);
  const runtime = Runtime.install({
    logger: new PinoTemporalLogger(logger.child({ component: 'temporal' })),
    ...(bindAddress && {
      telemetryOptions: {
        metrics: {
          // Seconds for the SDK's latencies too, so every duration on the dashboard has one unit.
          prometheus: { bindAddress, useSecondsForDurations: true, histogramBucketOverrides: metricBuckets },
          globalTags: { tbt_worker: kind },
        },
      },
    }),
  });
  if (!bindAddress) return undefined;
  enableMetrics(runtime.metricMeter);
  logger.info({ metrics: `http://${bindAddress}/metrics` }, 'Prometheus metrics on');
  return bindAddress;
}

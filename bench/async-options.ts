import { parseArgs } from 'node:util';
import type { RawCampaignConfig } from '../config/config-variant.ts';

/**
 * bench:async's arguments, run modes and summary line, apart from the bench itself (which starts workers and
 * campaigns on import) so they can be tested.
 */

export const ASYNC_BENCH_MODES = ['sync', 'async', 'partial'] as const;
export type AsyncBenchMode = (typeof ASYNC_BENCH_MODES)[number];

/**
 * `default`: bench/async/config.yaml as it is (sampling and the update about equal on 2 cores). `rollouts`:
 * rollouts dominate, as with a slow or remote policy: a quarter of the episodes in flight and twice the tokens per
 * turn, which puts sampling at about 4x the update (each mode's table prints the measured ratio).
 */
export const ASYNC_BENCH_WORKLOADS = ['default', 'rollouts'] as const;
export type AsyncBenchWorkload = (typeof ASYNC_BENCH_WORKLOADS)[number];

export interface AsyncBenchOptions {
  steps?: number;
  config: string;
  workload: AsyncBenchWorkload;
  modes: AsyncBenchMode[];
}

export function parseAsyncBenchArgs(args: string[], defaultConfig: string): AsyncBenchOptions {
  const { values } = parseArgs({
    args,
    options: {
      steps: { type: 'string' },
      config: { type: 'string', default: defaultConfig },
      workload: { type: 'string', default: 'default' },
      modes: { type: 'string', default: ASYNC_BENCH_MODES.join(',') },
    },
  });
  const steps = values.steps === undefined ? undefined : Number(values.steps);
  if (steps !== undefined && !(Number.isInteger(steps) && steps >= 1))
    throw new Error(`--steps: expected an integer >= 1, got ${values.steps}`);
  const workload = values.workload as AsyncBenchWorkload;
  if (!ASYNC_BENCH_WORKLOADS.includes(workload))
    throw new Error(`--workload: expected ${ASYNC_BENCH_WORKLOADS.join(' or ')}, got ${values.workload}`);
  const modes = values.modes.split(',').map((m) => m.trim()) as AsyncBenchMode[];
  const unknown = modes.filter((m) => !ASYNC_BENCH_MODES.includes(m));
  if (unknown.length || !modes.includes('sync') || new Set(modes).size !== modes.length)
    throw new Error(`--modes: a list of ${ASYNC_BENCH_MODES.join(', ')} with sync in it, got ${values.modes}`);
  return { ...(steps === undefined ? {} : { steps }), config: values.config, workload, modes };
}

/** The campaign of one mode: synchronous, overlapped, or overlapped with partial rollouts; the workload's load. */
export function asyncBenchVariant(
  config: RawCampaignConfig & { training: Record<string, unknown>; episode: Record<string, unknown> },
  mode: AsyncBenchMode,
  workload: AsyncBenchWorkload,
  steps: number,
): void {
  config.name = `${String(config.name)}-${workload === 'default' ? '' : `${workload}-`}${mode}`;
  config.training.max_staleness = mode === 'sync' ? 0 : 1;
  config.training.partial_rollouts = mode === 'partial';
  config.training.steps = steps;
  if (workload === 'rollouts') {
    config.training.concurrency = Math.max(1, Math.floor(Number(config.training.concurrency ?? 8) / 4));
    const limits = (config.episode.limits ??= {}) as Record<string, unknown>;
    limits.max_tokens_per_turn = 2 * Number(limits.max_tokens_per_turn ?? 64);
  }
}

export interface AsyncBenchSummary {
  steps: number;
  minutes: Partial<Record<AsyncBenchMode, number>>;
  meanLag: number;
  maxLag: number;
}

/** The bench's last line; a mode not run reads `na`. */
export function asyncBenchLine({ steps, minutes, meanLag, maxLag }: AsyncBenchSummary): string {
  const m = (mode: AsyncBenchMode) => (minutes[mode] === undefined ? 'na' : minutes[mode]!.toFixed(1));
  const speedup = (mode: AsyncBenchMode) =>
    minutes.sync === undefined || minutes[mode] === undefined ? 'na' : (minutes.sync / minutes[mode]!).toFixed(2);
  return (
    `async: steps=${steps} sync_minutes=${m('sync')} async_minutes=${m('async')} partial_minutes=${m('partial')} ` +
    `speedup=${speedup('async')} partial_speedup=${speedup('partial')} mean_lag=${meanLag.toFixed(2)} ` +
    `max_lag=${maxLag}`
  );
}

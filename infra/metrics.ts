import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter } from '@temporalio/common';
import { infrastructureErrorClass } from '../core/infrastructure-error-class.ts';

/**
 * Our Prometheus metrics (prefix `tbt_`), recorded through the Temporal SDK's metric meter so that the worker's
 * one metrics port serves the SDK's series and ours (infra/worker-runtime.ts turns it on; docs/metrics.md lists
 * them). Services call the helpers of `metrics` and know nothing of the SDK; until a worker enables metrics
 * (TBT_METRICS_PORT unset, tests, the CLI) every helper does nothing.
 */

/** Histogram buckets in seconds, by metric name (the exporter's defaults are millisecond-sized). */
export const metricBuckets: Record<string, number[]> = {
  tbt_episode_duration_seconds: [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800],
  tbt_weight_sync_seconds: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300],
  tbt_learner_step_seconds: [1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200],
};

interface Instruments {
  episodesFinished: MetricCounter;
  infrastructureErrors: MetricCounter;
  episodeDuration: MetricHistogram;
  sandboxAcquired: MetricCounter;
  sandboxWarmClones: MetricGauge;
  sandboxLeased: MetricGauge;
  weightSync: MetricHistogram;
  learnerStep: MetricHistogram;
  episodesResumed: MetricCounter;
}

let instruments: Instruments | undefined;

/** Creates our instruments on `meter`; from then on the helpers record (a worker calls this once). */
export function enableMetrics(meter: MetricMeter): void {
  instruments = {
    episodesFinished: meter.createCounter(
      'tbt_episodes_finished_total',
      undefined,
      'Episodes finished and stored by this worker, by outcome and purpose',
    ),
    infrastructureErrors: meter.createCounter(
      'tbt_infrastructure_errors_total',
      undefined,
      'Episodes that ended in an infrastructure error, by class of the cause and purpose',
    ),
    episodeDuration: meter.createHistogram(
      'tbt_episode_duration_seconds',
      'float',
      's',
      'Wall-clock seconds of a finished episode, by outcome and purpose',
    ),
    sandboxAcquired: meter.createCounter(
      'tbt_sandbox_acquired_total',
      undefined,
      'Sandboxes leased by this worker, by source (warm: a ready clone; cold: cloned on the spot)',
    ),
    sandboxWarmClones: meter.createGauge(
      'tbt_sandbox_warm_clones',
      'int',
      undefined,
      'Ready (or being created) unleased clones of a template, as last counted by this worker',
    ),
    sandboxLeased: meter.createGauge('tbt_sandbox_leased', 'int', undefined, 'Sandboxes this worker holds now'),
    weightSync: meter.createHistogram(
      'tbt_weight_sync_seconds',
      'float',
      's',
      'Seconds to load new weights into a policy server, by reason (step: after a step; catch_up: a server behind)',
    ),
    episodesResumed: meter.createCounter(
      'tbt_episodes_resumed_total',
      undefined,
      'Attempts that found turns an earlier attempt saved, by how they used them (resumed, restarted from the prompt)',
    ),
    learnerStep: meter.createHistogram(
      'tbt_learner_step_seconds',
      'float',
      's',
      'Seconds of one training step on the learner, as the GPU worker waited for it (repeated: a retried step)',
    ),
  };
}

/** Back to no-ops (tests). */
export function disableMetrics(): void {
  instruments = undefined;
}

export function metricsEnabled(): boolean {
  return instruments !== undefined;
}

export type EpisodeOutcome = 'success' | 'agent_failure' | 'infrastructure_error' | 'task_error';

export const metrics = {
  /** A finished episode this worker stored (not one a retry found stored already). */
  episodeFinished(episode: { outcome: EpisodeOutcome; purpose: string; seconds: number; cause?: string }): void {
    if (!instruments) return;
    const tags = { outcome: episode.outcome, purpose: episode.purpose };
    instruments.episodesFinished.add(1, tags);
    instruments.episodeDuration.record(Math.max(0, episode.seconds), tags);
    if (episode.outcome === 'infrastructure_error')
      instruments.infrastructureErrors.add(1, {
        class: infrastructureErrorClass(episode.cause),
        purpose: episode.purpose,
      });
  },
  sandboxAcquired(source: 'warm' | 'cold'): void {
    instruments?.sandboxAcquired.add(1, { source });
  },
  sandboxWarmClones(template: string, count: number): void {
    instruments?.sandboxWarmClones.set(count, { template });
  },
  sandboxLeased(count: number): void {
    instruments?.sandboxLeased.set(count);
  },
  weightSynced(seconds: number, reason: 'step' | 'catch_up', transport: 'disk' | 'collective' | 'lora'): void {
    instruments?.weightSync.record(Math.max(0, seconds), { reason, transport });
  },
  episodeResumed(how: 'resumed' | 'restarted'): void {
    instruments?.episodesResumed.add(1, { how });
  },
  learnerStepFinished(seconds: number, repeated: boolean): void {
    instruments?.learnerStep.record(Math.max(0, seconds), { repeated: String(repeated) });
  },
};

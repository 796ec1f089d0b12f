import type { EpisodeSummary } from '../rollout/episode-store.ts';
import type { TaskCursor } from '../core/epoch-task-order.ts';
import type { DrawnGroup, GroupSelection } from './group-selection.ts';

/**
 * A training step's groups once sampled, as the update and the step's record need them. Small and plain on
 * purpose: with overlapped steps (`training.max_staleness` > 0) step n samples step n+1's groups while its own
 * update runs, and this travels in the campaign's state (continue-as-new) to the next step's child.
 */
export interface SampledStep {
  step: number;
  /** Weight version the servers held when the sampling started. */
  startVersion: number;
  /** Version the learner holds when it trains on these episodes (step - 1): the lag is measured against it. */
  trainVersion: number;
  /** Wall seconds the sampling took (workflow time). */
  seconds: number;
  /** The groups the step trains on. */
  groups: { uid: string; episodes: SampledEpisode[] }[];
  informativeGroups: number;
  zeroVarianceGroups: number;
  replacements: number;
  lostGroups: number;
  infraErrors: number;
  staleEpisodes: number;
  fallback: GroupSelection<DrawnGroup>['fallback'];
  /** Groups dropped because their task's test code raised (absent: none, or sampled by older code). */
  taskErrors?: GroupSelection<DrawnGroup>['taskErrors'];
  /** `task_order: epoch`: the task stream's cursor past the tasks these groups drew. */
  taskCursor?: TaskCursor;
}

export type SampledEpisode = Pick<EpisodeSummary, 'id' | 'reward' | 'outcome' | 'weightVersion' | 'versionTokens'>;

/**
 * The version of an episode's oldest token, which its lag and the staleness bound count: with partial rollouts the
 * oldest of the versions its tokens carry, else the version it started on (undefined: it predates versioning).
 */
export function oldestVersion(e: Pick<SampledEpisode, 'weightVersion' | 'versionTokens'>): number | undefined {
  const versions = Object.keys(e.versionTokens ?? {}).map(Number);
  return versions.length ? Math.min(...versions) : e.weightVersion;
}

/**
 * Trained tokens per sampler version over the groups' episodes (the step's version mix); undefined when none of
 * them carried versions.
 */
export function versionMix(groups: SampledStep['groups']): Record<string, number> | undefined {
  const mix: Record<string, number> = {};
  for (const g of groups)
    for (const e of g.episodes) for (const [v, n] of Object.entries(e.versionTokens ?? {})) mix[v] = (mix[v] ?? 0) + n;
  return Object.keys(mix).length ? mix : undefined;
}

export function sampledStep(
  selection: GroupSelection<DrawnGroup & { episodes: EpisodeSummary[] }>,
  at: Pick<SampledStep, 'step' | 'startVersion' | 'trainVersion' | 'seconds'>,
): SampledStep {
  return {
    ...at,
    groups: selection.trained.map((g) => ({
      uid: g.uid,
      episodes: g.episodes.map((e) => ({
        id: e.id,
        reward: e.reward,
        outcome: e.outcome,
        ...(e.weightVersion === undefined ? {} : { weightVersion: e.weightVersion }),
        ...(e.versionTokens ? { versionTokens: e.versionTokens } : {}),
      })),
    })),
    informativeGroups: selection.informative.length,
    zeroVarianceGroups: selection.zeroVariance.length,
    replacements: selection.replacements,
    lostGroups: selection.lostGroups,
    infraErrors: selection.infraErrors,
    staleEpisodes: selection.staleEpisodes,
    fallback: selection.fallback,
    ...(selection.taskErrors.length ? { taskErrors: selection.taskErrors } : {}),
  };
}

/**
 * Versions each trained episode's oldest token lags behind the weights the learner trains from (an episode without
 * a version predates versioning: no lag). Mean and most over the step's trained episodes; 0 and 0 when none.
 */
export function episodeLag(sample: SampledStep): { mean: number; max: number } {
  const lags = sample.groups.flatMap((g) =>
    g.episodes.map((e) => sample.trainVersion - (oldestVersion(e) ?? sample.trainVersion)),
  );
  if (lags.length === 0) return { mean: 0, max: 0 };
  return { mean: lags.reduce((a, b) => a + b, 0) / lags.length, max: Math.max(...lags) };
}

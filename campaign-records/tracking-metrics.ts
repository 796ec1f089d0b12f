import { COST_SCOPE_ORDER, type CostFigures } from '../core/metrics.ts';
import type { StepRecord } from './step-record.ts';

/** One tracker entry: a training step's metrics (`train/*`) or an evaluation's (`eval/*`), at a step number. */
export interface TrackingEntry {
  kind: 'step' | 'evaluation';
  step: number;
  metrics: Record<string, number>;
}

const finite = (metrics: Record<string, number | undefined>): Record<string, number> =>
  Object.fromEntries(
    Object.entries(metrics).filter((e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1])),
  );

/** Every number of a step record: selection, weights and sync, and each numeric learner metric (`update.*`). */
export function trackingEntryOfStep(r: StepRecord): TrackingEntry {
  const episodes = r.groups.reduce((a, g) => a + g.rewards.length, 0);
  const drawn = r.informativeGroups + r.zeroVarianceGroups;
  const sync = r.syncSeconds ?? [];
  const learner = Object.fromEntries(
    Object.entries(r.update).flatMap(([k, v]) =>
      typeof v === 'number' ? [[`train/${k.replace('time_s', 'update_s')}`, v]] : [],
    ),
  );
  return {
    kind: 'step',
    step: r.step,
    metrics: finite({
      'train/mean_reward': r.meanReward,
      'train/groups': r.groups.length,
      'train/episodes': episodes,
      'train/informative_groups': r.informativeGroups,
      'train/zero_variance_groups': r.zeroVarianceGroups,
      'train/informative_group_fraction': drawn ? r.informativeGroups / drawn : 0,
      'train/replacements': r.replacements,
      'train/lost_groups': r.lostGroups,
      'train/infra_refills': r.infraErrors,
      'train/leaked_infra_episodes': r.leakedInfraEpisodes,
      'train/stale_episodes': r.staleEpisodes ?? 0,
      'train/repeated_update': r.repeatedUpdate ? 1 : 0,
      // A re-run step whose offered batch differed from the one trained (the record describes the trained one).
      'train/batch_mismatch': r.batchMismatch ? 1 : 0,
      'train/task_error_groups': r.taskErrorGroups?.length ?? 0,
      'train/weight_version': r.weightVersion,
      'train/sampled_weight_version': r.sampledWeightVersion,
      // Versions the sampling policy lagged behind the one this step updated (0 = on-policy).
      'train/weight_lag': r.sampledWeightVersion === undefined ? undefined : r.step - 1 - r.sampledWeightVersion,
      // Per trained episode (a sync during an overlapped sampling leaves some episodes a version newer).
      'train/lag_mean': r.episodeLag?.mean,
      'train/lag_max': r.episodeLag?.max,
      'train/sync_s': sync.length ? Math.max(...sync) : undefined,
      'train/sample_s': r.phaseSeconds?.sample,
      'train/update_s': r.phaseSeconds?.update,
      'train/drain_s': r.phaseSeconds?.drain,
      ...learner,
    }),
  };
}

interface AggregateSummary {
  tasks?: number;
  attempts?: number;
  successes?: number;
  pass_at_1?: { estimate?: number; bootstrap_tasks?: [number, number] };
  pass_at_k?: { k: number; estimate: number }[];
  pass_hat_k?: { k: number; estimate: number }[];
  observed_all_pass?: { k?: number; count?: number; rate?: number };
  solved_at_least_once?: { rate?: number };
}

interface AggregateCost {
  policy_only?: Partial<CostFigures>;
  all_roles?: Partial<CostFigures>;
  by_role?: Record<string, { cost?: number }>;
}

/** pass@1 (with its task-bootstrap interval), pass@k, pass^k, observed k/k and costs of a `tbt eval aggregate` file. */
export function trackingEntryOfEvaluation(aggregate: Record<string, unknown>, stepsTrained: number): TrackingEntry {
  const o = (aggregate.overall ?? {}) as AggregateSummary;
  const cost = (aggregate.cost ?? {}) as AggregateCost;
  const byK = (list: { k: number; estimate: number }[] | undefined, name: string) =>
    Object.fromEntries((list ?? []).map(({ k, estimate }) => [`eval/${name}_${k}`, estimate]));
  const roles = Object.fromEntries(
    Object.entries(cost.by_role ?? {}).map(([role, c]) => [`eval/cost_${role}_usd`, c.cost]),
  );
  // Named for whose tokens they count: policy_only is the reference's figure, all_roles adds user and judge.
  const figures = Object.fromEntries(
    COST_SCOPE_ORDER.flatMap((scope) => [
      [`eval/campaign_cost_${scope}_usd`, cost[scope]?.campaign ?? undefined],
      [`eval/cost_per_successful_attempt_${scope}_usd`, cost[scope]?.per_successful_attempt ?? undefined],
      [`eval/cost_per_reliable_task_${scope}_usd`, cost[scope]?.per_reliable_task ?? undefined],
    ]),
  );
  return {
    kind: 'evaluation',
    step: stepsTrained,
    metrics: finite({
      'eval/pass_at_1': o.pass_at_1?.estimate,
      'eval/pass_at_1_ci_low': o.pass_at_1?.bootstrap_tasks?.[0],
      'eval/pass_at_1_ci_high': o.pass_at_1?.bootstrap_tasks?.[1],
      ...byK(o.pass_at_k, 'pass_at'),
      ...byK(o.pass_hat_k, 'pass_hat'),
      'eval/all_pass_k': o.observed_all_pass?.k,
      'eval/all_pass_tasks': o.observed_all_pass?.count,
      'eval/all_pass_rate': o.observed_all_pass?.rate,
      'eval/solved_at_least_once': o.solved_at_least_once?.rate,
      'eval/tasks': o.tasks,
      'eval/attempts': o.attempts,
      'eval/successes': o.successes,
      ...figures,
      ...roles,
    }),
  };
}

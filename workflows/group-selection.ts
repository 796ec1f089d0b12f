import type { CampaignConfig } from '../config/campaign-config.ts';
import { isZeroVariance } from '../core/grpo.ts';

/**
 * Which groups a training step trains on (DAPO-style dynamic sampling), as a pure function of the groups drawn
 * so far: the first round draws `groups_per_step` tasks from the step's seeded order; each later round draws
 * fresh tasks for the informative groups still missing, at most `max_replacements` in all. A group lost to
 * infrastructure errors or without reward variance is replaced, never trained, unless the replacements run out:
 * then the configured fallback trains on the informative groups found (`train_on_fewer`) or fills up with
 * zero-variance groups (`keep_zero_variance`, and always when no group is informative). No Temporal import:
 * the step workflow runs the draws, this module decides them.
 */

export type ZeroVarianceFallback = CampaignConfig['training']['zero_variance_fallback'];

/** The campaign's training settings that decide the selection. */
export type GroupSelectionKnobs = Pick<
  CampaignConfig['training'],
  'groups_per_step' | 'max_replacements' | 'zero_variance_fallback'
>;

/** What selection needs of one group the step ran. */
export interface DrawnGroup {
  uid: string;
  /** Rewards of the group's valid episodes (infrastructure-errored and stale ones are not among them). */
  rewards: number[];
  /** Still short of `group_size` valid episodes after the refill cap. */
  lost: boolean;
  infraErrors: number;
  stale: number;
  /** Set when an episode of the group was a task error (its cause): the group is lost, its task dropped. */
  taskError?: string;
}

export interface GroupDraws<G extends DrawnGroup> {
  /** The step's task order; rounds take it front to back. */
  order: string[];
  /** This attempt's groups, one array per round, each in the order of the uids that round drew. */
  rounds: G[][];
  /** Groups of the step's earlier attempts (each lost every group): they count, nothing more. */
  earlierAttempts?: G[];
}

export interface GroupSelection<G extends DrawnGroup> {
  /** Uids of the next round to draw; empty once the selection is final (enough informative groups or none left). */
  next: string[];
  informative: G[];
  zeroVariance: G[];
  lost: G[];
  /** Groups the step trains on (final once `next` is empty). */
  trained: G[];
  /** Set when fewer informative groups than `groups_per_step` were found. */
  fallback: ZeroVarianceFallback | null;
  /** Tasks drawn after the first round of this attempt, in place of lost and zero-variance groups. */
  replacements: number;
  /** Counts over this attempt and the earlier ones. */
  lostGroups: number;
  infraErrors: number;
  staleEpisodes: number;
  /** Groups lost to their task's own test code raising (outcome task_error), with the cause. */
  taskErrors: { uid: string; cause: string }[];
}

export type GroupVerdict = 'lost' | 'zero_variance' | 'informative';

export function groupVerdict(group: DrawnGroup): GroupVerdict {
  if (group.lost) return 'lost';
  return isZeroVariance(group.rewards) ? 'zero_variance' : 'informative';
}

/** Uids of the next round (empty when the selection is final). */
function nextRound(
  order: string[],
  drawn: { rounds: number; tasks: number; replacements: number; informative: number },
  knobs: GroupSelectionKnobs,
): string[] {
  if (drawn.informative >= knobs.groups_per_step) return [];
  const wanted = knobs.groups_per_step - drawn.informative;
  const allowed = drawn.rounds === 0 ? wanted : Math.min(wanted, knobs.max_replacements - drawn.replacements);
  return order.slice(drawn.tasks, drawn.tasks + allowed);
}

/** The informative groups, topped up with zero-variance ones when the fallback says so or nothing else is left. */
function trainedGroups<G extends DrawnGroup>(informative: G[], zeroVariance: G[], knobs: GroupSelectionKnobs) {
  let fallback: ZeroVarianceFallback | null = null;
  const trained = [...informative];
  if (trained.length < knobs.groups_per_step) {
    fallback = knobs.zero_variance_fallback;
    if (fallback === 'keep_zero_variance' || trained.length === 0)
      trained.push(...zeroVariance.slice(0, knobs.groups_per_step - trained.length));
  }
  return { trained, fallback };
}

export function selectGroups<G extends DrawnGroup>(
  draws: GroupDraws<G>,
  knobs: GroupSelectionKnobs,
): GroupSelection<G> {
  const byVerdict: Record<GroupVerdict, G[]> = { lost: [], zero_variance: [], informative: [] };
  for (const group of draws.rounds.flat()) byVerdict[groupVerdict(group)].push(group);
  const { lost, zero_variance: zeroVariance, informative } = byVerdict;
  const tasks = draws.rounds.reduce((n, round) => n + round.length, 0);
  const replacements = tasks - (draws.rounds[0]?.length ?? 0);
  const drawn = { rounds: draws.rounds.length, tasks, replacements, informative: informative.length };
  const next = nextRound(draws.order, drawn, knobs);
  const counted = [...(draws.earlierAttempts ?? []), ...draws.rounds.flat()];
  return {
    next,
    informative,
    zeroVariance,
    lost,
    ...trainedGroups(informative, zeroVariance, knobs),
    replacements,
    lostGroups: counted.filter((g) => g.lost).length,
    infraErrors: counted.reduce((n, g) => n + g.infraErrors, 0),
    staleEpisodes: counted.reduce((n, g) => n + g.stale, 0),
    taskErrors: counted.flatMap((g) => (g.taskError ? [{ uid: g.uid, cause: g.taskError }] : [])),
  };
}

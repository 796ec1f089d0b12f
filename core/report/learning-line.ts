import type { FamilyInterval } from '../family-bootstrap.ts';
import type { PairedDifference } from '../metrics.ts';

/** `--split instances`: held-out tasks are other instances of trained families; `templates`: unseen families. */
export const LEARNING_SPLITS = ['instances', 'templates'] as const;
export type LearningSplit = (typeof LEARNING_SPLITS)[number];

/** The paired comparison the line reports; the task-level interval is null when only family totals survive. */
export interface LearningPaired {
  tasks: number;
  pass_at_1: Omit<PairedDifference, 'interval'> & { interval: [number, number] | null };
}

/**
 * The learning benchmark's verdict, one line a script can grep: held-out pass@1 before and after training,
 * the paired difference, its bootstrap interval over tasks (`ci95`) and over task families (`ci95_family`), the
 * split, the number of tasks and attempts per task, and the wall time. Fields are only ever added before `tasks=`,
 * never moved, so parsers of older lines keep working. `ci95_family` LO > 0 means the gain is not explained by
 * which families happened to be drawn; it is the wider one when gains move family by family.
 */
export function learningLine(
  paired: LearningPaired,
  family: FamilyInterval,
  split: LearningSplit,
  attemptsPerTask: number,
  minutes: number,
): string {
  const p = paired.pass_at_1;
  const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(3)}`;
  const interval = (i: [number, number] | null) => (i ? `[${signed(i[0])},${signed(i[1])}]` : 'n/a');
  return (
    `learning: pass@1 before=${p.a.toFixed(3)} after=${p.b.toFixed(3)} delta=${signed(p.difference)} ` +
    `ci95=${interval(p.interval)} ci95_family=${interval(family.interval)} families=${family.families} ` +
    `split=${split} tasks=${paired.tasks} attempts=${attemptsPerTask} minutes=${minutes.toFixed(1)}`
  );
}

import type { Comparison } from '../metrics.ts';

/**
 * The learning benchmark's verdict, one line a script can grep: held-out pass@1 before and after training,
 * the paired difference and its bootstrap interval over tasks, the number of tasks and attempts per task,
 * and the wall time. LO > 0 means the gain is not explained by which tasks happened to be drawn.
 */
export function learningLine(paired: Comparison, attemptsPerTask: number, minutes: number): string {
  const p = paired.pass_at_1;
  const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(3)}`;
  return (
    `learning: pass@1 before=${p.a.toFixed(3)} after=${p.b.toFixed(3)} delta=${signed(p.difference)} ` +
    `ci95=[${signed(p.interval[0])},${signed(p.interval[1])}] tasks=${paired.tasks} attempts=${attemptsPerTask} ` +
    `minutes=${minutes.toFixed(1)}`
  );
}

/**
 * The ideal a bounded runner is measured against (bench/utilisation.ts): one continuous pool of `slots` that
 * takes the jobs in order, each as soon as a slot is free. Returns when the last job ends (jobs start at 0).
 */
export function continuousPoolMakespan(durations: readonly number[], slots: number): number {
  if (!Number.isInteger(slots) || slots < 1) throw new Error(`slots must be an integer >= 1, got ${slots}`);
  const free = new Array<number>(slots).fill(0);
  for (const d of durations) {
    let i = 0;
    for (let j = 1; j < slots; j++) if (free[j]! < free[i]!) i = j;
    free[i] = free[i]! + d;
  }
  return Math.max(...free);
}

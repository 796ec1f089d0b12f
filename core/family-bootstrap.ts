import { mulberry32, quantileSorted, type BootstrapOptions } from './metrics.ts';

/**
 * The family-clustered (cluster) bootstrap: resample task families with replacement and take every task of each
 * family drawn. Tasks of one family move together (a policy that learns a tool passes all its instances), so
 * resampling tasks one by one treats correlated tasks as independent and makes an interval too narrow; resampling
 * families asks whether the result holds for other families like these. Pure and deterministic (seeded PRNG).
 */

/** One family's share of a mean over tasks: the sum of its tasks' values and how many tasks it has. */
export interface Cluster {
  sum: number;
  count: number;
}

/**
 * Percentile bootstrap interval of (sum of drawn sums) / (sum of drawn counts), drawing as many clusters as there
 * are, with replacement. It draws exactly as `bootstrapMeanIntervals` does, so with clusters of one task in the
 * same order and the same seed it gives that function's interval.
 */
export function clusterBootstrapInterval(
  clusters: readonly Cluster[],
  options: BootstrapOptions = {},
): [number, number] {
  const resamples = options.resamples ?? 10_000;
  const level = options.level ?? 0.95;
  if (!Number.isInteger(resamples) || resamples < 1)
    throw new RangeError(`resamples must be a positive integer, got ${resamples}`);
  if (!(level > 0 && level < 1)) throw new RangeError(`interval level must be in (0, 1), got ${level}`);
  const n = clusters.length;
  if (n === 0) throw new RangeError('cluster bootstrap of zero clusters');
  clusters.forEach((c, i) => {
    if (!Number.isInteger(c.count) || c.count < 1 || !Number.isFinite(c.sum))
      throw new RangeError(`cluster ${i}: need a finite sum and an integer count >= 1, got ${c.sum} / ${c.count}`);
  });
  const random = mulberry32(options.seed ?? 42);
  const means = new Float64Array(resamples);
  for (let r = 0; r < resamples; r++) {
    let sum = 0;
    let count = 0;
    for (let i = 0; i < n; i++) {
      const pick = clusters[Math.floor(random() * n)]!;
      sum += pick.sum;
      count += pick.count;
    }
    means[r] = sum / count;
  }
  const sorted = Array.from(means).sort((x, y) => x - y);
  const tail = (1 - level) / 2;
  return [quantileSorted(sorted, tail), quantileSorted(sorted, 1 - tail)];
}

export interface FamilyInterval {
  families: number;
  interval: [number, number];
}

/**
 * The family-clustered interval of the mean per-task difference (a paired comparison's `per_task`): tasks are
 * grouped by `familyOf(uid)`, families in the order their first task appears.
 */
export function familyClusteredInterval(
  perTask: readonly { uid: string; difference: number }[],
  familyOf: (uid: string) => string,
  options: BootstrapOptions = {},
): FamilyInterval {
  const byFamily = new Map<string, Cluster>();
  for (const t of perTask) {
    const family = familyOf(t.uid);
    const cluster = byFamily.get(family);
    if (cluster) {
      cluster.sum += t.difference;
      cluster.count += 1;
    } else byFamily.set(family, { sum: t.difference, count: 1 });
  }
  const clusters = [...byFamily.values()];
  return { families: clusters.length, interval: clusterBootstrapInterval(clusters, options) };
}

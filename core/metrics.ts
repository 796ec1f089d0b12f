import { compareStrings } from './difficulty.ts';
import { inverseRegularizedIncompleteBeta } from './special-functions.ts';

/**
 * Evaluation metrics (docs/reference-rules.md §5): pass@1, unbiased pass@k and pass^k, the observed k/k count,
 * intervals, cost, and a paired comparison of two result sets. Pure and deterministic: the bootstrap
 * uses a seeded PRNG.
 */

/** n attempts of one task, c of them successful. */
export interface TaskOutcome {
  uid: string;
  domain: string;
  n: number;
  c: number;
}

function checkCounts(n: number, c: number, where = ''): void {
  if (!Number.isInteger(n) || !Number.isInteger(c) || n < 1 || c < 0 || c > n) {
    throw new RangeError(`${where}need integers n >= 1 and 0 <= c <= n, got n=${n}, c=${c}`);
  }
}

function checkK(n: number, k: number): void {
  if (!Number.isInteger(k) || k < 1 || k > n) throw new RangeError(`k must be an integer in [1, n=${n}], got ${k}`);
}

/**
 * C(a, k) / C(n, k) for 0 <= a <= n, as the product over i < k of (a - i) / (n - i): every factor is
 * in [0, 1], so nothing overflows for n in the thousands and the result keeps full relative precision.
 */
export function binomialRatio(a: number, n: number, k: number): number {
  if (k > a) return 0;
  let ratio = 1;
  for (let i = 0; i < k; i++) ratio *= (a - i) / (n - i);
  return ratio;
}

/** Unbiased pass@k: probability that at least one of k attempts drawn without replacement succeeds. */
export function passAtK(n: number, c: number, k: number): number {
  checkCounts(n, c);
  checkK(n, k);
  return 1 - binomialRatio(n - c, n, k);
}

/** Unbiased pass^k: probability that all k attempts drawn without replacement succeed, C(c,k)/C(n,k). */
export function passHatK(n: number, c: number, k: number): number {
  checkCounts(n, c);
  checkK(n, k);
  return binomialRatio(c, n, k);
}

/** pass@1 = mean over tasks of c/n. */
export function passAt1(tasks: readonly TaskOutcome[]): number {
  if (tasks.length === 0) throw new RangeError('pass@1 of zero tasks is undefined');
  let sum = 0;
  for (const t of tasks) {
    checkCounts(t.n, t.c, `task ${t.uid}: `);
    sum += t.c / t.n;
  }
  return sum / tasks.length;
}

/** Number of tasks with c = n = k: tasks passed in every one of exactly k attempts. */
export function observedAllPass(tasks: readonly TaskOutcome[], k: number): number {
  return tasks.filter((t) => t.n === k && t.c === k).length;
}

export function meanPassAtK(tasks: readonly TaskOutcome[], k: number): number {
  return tasks.reduce((sum, t) => sum + passAtK(t.n, t.c, k), 0) / tasks.length;
}

export function meanPassHatK(tasks: readonly TaskOutcome[], k: number): number {
  return tasks.reduce((sum, t) => sum + passHatK(t.n, t.c, k), 0) / tasks.length;
}

/** Standard normal quantile (Acklam's rational approximation, relative error below 1.2e-9). */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normalQuantile: p must be in (0, 1), got ${p}`);
  const a = [
    -3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1,
    2.506628277459239,
  ];
  const b = [
    -5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1,
  ];
  const c = [
    -7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (
      (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
      ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1)
    );
  }
  if (p > 1 - low) return -normalQuantile(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return (
    ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) /
    (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1)
  );
}

function zFor(level: number): number {
  if (!(level > 0 && level < 1)) throw new RangeError(`interval level must be in (0, 1), got ${level}`);
  return level === 0.95 ? 1.959963984540054 : normalQuantile(1 - (1 - level) / 2);
}

/** Wilson score interval for a binomial rate. */
export function wilsonInterval(successes: number, trials: number, level = 0.95): [number, number] {
  checkCounts(trials, successes);
  const z = zFor(level);
  const p = successes / trials;
  const z2n = (z * z) / trials;
  const centre = (p + z2n / 2) / (1 + z2n);
  const half = (z * Math.sqrt((p * (1 - p)) / trials + z2n / (4 * trials))) / (1 + z2n);
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

/** Exact (Clopper-Pearson) binomial interval from Beta quantiles. */
export function clopperPearsonInterval(successes: number, trials: number, level = 0.95): [number, number] {
  checkCounts(trials, successes);
  if (!(level > 0 && level < 1)) throw new RangeError(`interval level must be in (0, 1), got ${level}`);
  const tail = (1 - level) / 2;
  const lower = successes === 0 ? 0 : inverseRegularizedIncompleteBeta(tail, successes, trials - successes + 1);
  const upper =
    successes === trials ? 1 : inverseRegularizedIncompleteBeta(1 - tail, successes + 1, trials - successes);
  return [lower, upper];
}

/** mulberry32: a tiny, fast 32-bit PRNG; the same seed always gives the same sequence. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Quantile of sorted values with linear interpolation (Hyndman-Fan type 7, numpy's default). */
export function quantileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) throw new RangeError('quantile of an empty list');
  const h = (sorted.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (h - lo) * (sorted[hi]! - sorted[lo]!);
}

export interface BootstrapOptions {
  resamples?: number;
  seed?: number;
  level?: number;
}

/**
 * Percentile bootstrap intervals for the means of several per-item series resampled jointly
 * (the same resampled items for every series, which keeps paired structure).
 */
export function bootstrapMeanIntervals(
  series: readonly (readonly number[])[],
  options: BootstrapOptions = {},
): [number, number][] {
  const resamples = options.resamples ?? 10_000;
  const level = options.level ?? 0.95;
  if (!Number.isInteger(resamples) || resamples < 1)
    throw new RangeError(`resamples must be a positive integer, got ${resamples}`);
  if (!(level > 0 && level < 1)) throw new RangeError(`interval level must be in (0, 1), got ${level}`);
  const n = series[0]?.length ?? 0;
  if (n === 0) throw new RangeError('bootstrap of zero items');
  if (series.some((s) => s.length !== n)) throw new RangeError('bootstrap series must have equal lengths');
  const random = mulberry32(options.seed ?? 42);
  const means = series.map(() => new Float64Array(resamples));
  const sums = new Float64Array(series.length);
  for (let r = 0; r < resamples; r++) {
    sums.fill(0);
    for (let i = 0; i < n; i++) {
      const pick = Math.floor(random() * n);
      for (let s = 0; s < series.length; s++) sums[s]! += series[s]![pick]!;
    }
    for (let s = 0; s < series.length; s++) means[s]![r] = sums[s]! / n;
  }
  const tail = (1 - level) / 2;
  return means.map((m) => {
    const sorted = Array.from(m).sort((x, y) => x - y);
    return [quantileSorted(sorted, tail), quantileSorted(sorted, 1 - tail)];
  });
}

/** The ks reported for n repeats: the reference's 1, 5, 10, 20, 50, 100 up to n, and n itself. */
export function reportedKs(repeats: number): number[] {
  return [...new Set([1, 5, 10, 20, 50, 100, repeats].filter((k) => k <= repeats))].sort((x, y) => x - y);
}

export interface RateSummary {
  count: number;
  rate: number;
  wilson: [number, number];
  clopper_pearson: [number, number];
}

function rate(count: number, total: number, level: number): RateSummary {
  return {
    count,
    rate: count / total,
    wilson: wilsonInterval(count, total, level),
    clopper_pearson: clopperPearsonInterval(count, total, level),
  };
}

export interface Summary {
  tasks: number;
  attempts: number;
  successes: number;
  pass_at_1: {
    estimate: number;
    /** Wilson over all attempts: treats attempts as independent, so it is narrower than the truth when tasks differ. */
    wilson_attempts: [number, number];
    /** Percentile bootstrap over tasks (attempts stay clustered in their task). */
    bootstrap_tasks: [number, number];
  };
  pass_at_k: { k: number; estimate: number }[];
  pass_hat_k: { k: number; estimate: number }[];
  /** Tasks with c = n = k for the largest reported k. */
  observed_all_pass: RateSummary & { k: number };
  /** Tasks with at least one success. */
  solved_at_least_once: RateSummary;
}

export interface SummaryOptions {
  ks?: readonly number[];
  level?: number;
  seed?: number;
  resamples?: number;
}

export function summarize(tasks: readonly TaskOutcome[], options: SummaryOptions = {}): Summary {
  if (tasks.length === 0) throw new RangeError('cannot summarise zero tasks');
  for (const t of tasks) checkCounts(t.n, t.c, `task ${t.uid}: `);
  const level = options.level ?? 0.95;
  const minN = Math.min(...tasks.map((t) => t.n));
  const ks = options.ks ?? reportedKs(minN);
  const attempts = tasks.reduce((s, t) => s + t.n, 0);
  const successes = tasks.reduce((s, t) => s + t.c, 0);
  const kAll = Math.max(...ks);
  const [bootstrap] = bootstrapMeanIntervals([tasks.map((t) => t.c / t.n)], {
    resamples: options.resamples ?? 2000,
    seed: options.seed ?? 42,
    level,
  });
  return {
    tasks: tasks.length,
    attempts,
    successes,
    pass_at_1: {
      estimate: passAt1(tasks),
      wilson_attempts: wilsonInterval(successes, attempts, level),
      bootstrap_tasks: bootstrap!,
    },
    pass_at_k: ks.map((k) => ({ k, estimate: meanPassAtK(tasks, k) })),
    pass_hat_k: ks.map((k) => ({ k, estimate: meanPassHatK(tasks, k) })),
    observed_all_pass: { k: kAll, ...rate(observedAllPass(tasks, kAll), tasks.length, level) },
    solved_at_least_once: rate(tasks.filter((t) => t.c > 0).length, tasks.length, level),
  };
}

/** Summaries per domain, keys sorted. */
export function summarizeByDomain(
  tasks: readonly TaskOutcome[],
  options: SummaryOptions = {},
): Record<string, Summary> {
  const byDomain = new Map<string, TaskOutcome[]>();
  for (const t of tasks) {
    let list = byDomain.get(t.domain);
    if (!list) byDomain.set(t.domain, (list = []));
    list.push(t);
  }
  const out: Record<string, Summary> = {};
  for (const domain of [...byDomain.keys()].sort(compareStrings))
    out[domain] = summarize(byDomain.get(domain)!, options);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Cost

export const ROLES = ['policy', 'user', 'judge'] as const;
export type Role = (typeof ROLES)[number];

/** USD per million tokens. */
export interface RolePrice {
  input_per_million: number;
  output_per_million: number;
  cached_input_per_million: number;
}
export type PriceTable = Record<Role, RolePrice>;

/** Token counts of one call or one attempt. `input` counts uncached input tokens; `cached_input` the cached ones. */
export interface TokenUsage {
  input: number;
  output: number;
  cached_input: number;
}
export type RoleUsage = Partial<Record<Role, TokenUsage>>;

export function usageCost(usage: TokenUsage, price: RolePrice): number {
  return (
    (usage.input * price.input_per_million +
      usage.output * price.output_per_million +
      usage.cached_input * price.cached_input_per_million) /
    1e6
  );
}

export interface CostBreakdown {
  by_role: Record<Role, { tokens: TokenUsage; cost: number }>;
  total: number;
}

/** Campaign cost: the sum over all attempts, per role and in total. */
export function campaignCost(attempts: Iterable<RoleUsage>, prices: PriceTable): CostBreakdown {
  const tokens = Object.fromEntries(ROLES.map((r) => [r, { input: 0, output: 0, cached_input: 0 }])) as Record<
    Role,
    TokenUsage
  >;
  for (const attempt of attempts) {
    for (const role of ROLES) {
      const u = attempt[role];
      if (!u) continue;
      tokens[role].input += u.input;
      tokens[role].output += u.output;
      tokens[role].cached_input += u.cached_input;
    }
  }
  const byRole = Object.fromEntries(
    ROLES.map((r) => [r, { tokens: tokens[r], cost: usageCost(tokens[r], prices[r]) }]),
  ) as CostBreakdown['by_role'];
  return { by_role: byRole, total: ROLES.reduce((s, r) => s + byRole[r].cost, 0) };
}

/** Campaign cost / passing attempts; null when nothing passed. */
export function costPerSuccessfulAttempt(campaign: number, passingAttempts: number): number | null {
  return passingAttempts > 0 ? campaign / passingAttempts : null;
}

/** Campaign cost / tasks at k/k; null when no task passed every attempt. */
export function costPerReliableTask(campaign: number, reliableTasks: number): number | null {
  return reliableTasks > 0 ? campaign / reliableTasks : null;
}

/**
 * Whose tokens a cost figure counts. The reference's serving-cost index ($925.80, $8.00 per reliable task) counts
 * the evaluated model's inference alone; running an evaluation also pays the simulated user and the judge, so we
 * report both, never one under the other's name.
 */
export const COST_SCOPES = {
  policy_only: {
    roles: ['policy'],
    label: 'policy only',
    counts: "the evaluated model's inference tokens, as the reference counts",
  },
  all_roles: { roles: ROLES, label: 'all roles', counts: 'policy + simulated user + judge tokens' },
} as const satisfies Record<string, { roles: readonly Role[]; label: string; counts: string }>;
export type CostScope = keyof typeof COST_SCOPES;
/** The reference's figure first. */
export const COST_SCOPE_ORDER: readonly CostScope[] = ['policy_only', 'all_roles'];

/** The three cost figures of one scope; the divisors are the same attempts and tasks for every scope. */
export interface CostFigures {
  campaign: number;
  per_successful_attempt: number | null;
  per_reliable_task: number | null;
}

/** Campaign cost, per successful attempt and per reliable task, for each scope of a breakdown. */
export function costFigures(
  breakdown: CostBreakdown,
  passingAttempts: number,
  reliableTasks: number,
): Record<CostScope, CostFigures> {
  const figures = (scope: CostScope): CostFigures => {
    const roles: readonly Role[] = COST_SCOPES[scope].roles;
    const campaign = roles.reduce((s, r) => s + breakdown.by_role[r].cost, 0);
    return {
      campaign,
      per_successful_attempt: costPerSuccessfulAttempt(campaign, passingAttempts),
      per_reliable_task: costPerReliableTask(campaign, reliableTasks),
    };
  };
  return { policy_only: figures('policy_only'), all_roles: figures('all_roles') };
}

// ---------------------------------------------------------------------------------------------------
// Paired comparison

export interface PairedDifference {
  a: number;
  b: number;
  /** b - a */
  difference: number;
  interval: [number, number];
}

export interface Comparison {
  tasks: number;
  resamples: number;
  seed: number;
  level: number;
  /** Mean per-task pass@1 (c/n) of A and B, their difference and a paired bootstrap interval over tasks. */
  pass_at_1: PairedDifference;
  /** Fraction of tasks passed in every attempt (c = n). */
  all_pass_rate: PairedDifference;
  /** Tasks where B's c/n is above, below or equal to A's. */
  b_better: number;
  b_worse: number;
  equal: number;
  domains: Record<string, { tasks: number; pass_at_1: PairedDifference }>;
  per_task: { uid: string; domain: string; a: number; b: number; difference: number }[];
}

/** Paired per-task comparison of two result sets over the same tasks (B minus A). */
export function pairedComparison(
  a: readonly TaskOutcome[],
  b: readonly TaskOutcome[],
  options: BootstrapOptions = {},
): Comparison {
  const resamples = options.resamples ?? 10_000;
  const seed = options.seed ?? 42;
  const level = options.level ?? 0.95;
  const byUidA = indexByUid(a, 'A');
  const byUidB = indexByUid(b, 'B');
  const onlyA = [...byUidA.keys()].filter((u) => !byUidB.has(u)).sort(compareStrings);
  const onlyB = [...byUidB.keys()].filter((u) => !byUidA.has(u)).sort(compareStrings);
  if (onlyA.length || onlyB.length) {
    const show = (l: string[]) => l.slice(0, 5).join(', ') + (l.length > 5 ? `, ... (${l.length} in all)` : '');
    throw new RangeError(
      `paired comparison needs the same tasks on both sides: ${onlyA.length} only in ` +
        `A${onlyA.length ? ` (${show(onlyA)})` : ''}, ${onlyB.length} only in ` +
        `B${onlyB.length ? ` (${show(onlyB)})` : ''}`,
    );
  }
  const uids = [...byUidA.keys()].sort(compareStrings);
  if (uids.length === 0) throw new RangeError('paired comparison of zero tasks');
  const perTask = uids.map((uid) => {
    const ta = byUidA.get(uid)!;
    const tb = byUidB.get(uid)!;
    if (ta.domain !== tb.domain)
      throw new RangeError(`task ${uid}: domain '${ta.domain}' in A but '${tb.domain}' in B`);
    return { uid, domain: ta.domain, ta, tb, a: ta.c / ta.n, b: tb.c / tb.n, difference: tb.c / tb.n - ta.c / ta.n };
  });
  const paired = (rows: typeof perTask, salt: number): { pass1: PairedDifference; all: PairedDifference } => {
    const pa = rows.map((r) => r.a);
    const pb = rows.map((r) => r.b);
    const d1 = rows.map((r) => r.difference);
    const allA = rows.map((r) => (r.ta.c === r.ta.n ? 1 : 0));
    const allB = rows.map((r) => (r.tb.c === r.tb.n ? 1 : 0));
    const dAll = rows.map((_, i) => allB[i]! - allA[i]!);
    const [i1, iAll] = bootstrapMeanIntervals([d1, dAll], { resamples, seed: (seed + salt) >>> 0, level });
    const mean = (v: number[]) => v.reduce((s, x) => s + x, 0) / v.length;
    return {
      pass1: { a: mean(pa), b: mean(pb), difference: mean(d1), interval: i1! },
      all: { a: mean(allA), b: mean(allB), difference: mean(dAll), interval: iAll! },
    };
  };
  const overall = paired(perTask, 0);
  const domains: Comparison['domains'] = {};
  const domainNames = [...new Set(perTask.map((r) => r.domain))].sort(compareStrings);
  domainNames.forEach((domain, i) => {
    const rows = perTask.filter((r) => r.domain === domain);
    domains[domain] = { tasks: rows.length, pass_at_1: paired(rows, i + 1).pass1 };
  });
  return {
    tasks: uids.length,
    resamples,
    seed,
    level,
    pass_at_1: overall.pass1,
    all_pass_rate: overall.all,
    b_better: perTask.filter((r) => r.difference > 0).length,
    b_worse: perTask.filter((r) => r.difference < 0).length,
    equal: perTask.filter((r) => r.difference === 0).length,
    domains,
    per_task: perTask.map(({ uid, domain, a, b, difference }) => ({ uid, domain, a, b, difference })),
  };
}

function indexByUid(tasks: readonly TaskOutcome[], side: string): Map<string, TaskOutcome> {
  const map = new Map<string, TaskOutcome>();
  for (const t of tasks) {
    checkCounts(t.n, t.c, `${side}: task ${t.uid}: `);
    if (map.has(t.uid)) throw new RangeError(`${side}: task ${t.uid} appears twice`);
    map.set(t.uid, t);
  }
  return map;
}

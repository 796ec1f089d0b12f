import { inverseRegularizedIncompleteBeta, regularizedIncompleteBeta } from './special-functions.ts';

/**
 * Offline, policy-relative task difficulty (docs/reference-rules.md §1): per-uid probe counts, the Jeffreys
 * posterior over the success probability, five fixed bands and selection (the train/test split is
 * core/reference-split.ts). Pure functions; file reading and writing live in cli/commands/prepare.ts.
 */

export const BANDS = [
  { name: 'too_hard', lower: 0, upper: 0.08 },
  { name: 'hard', lower: 0.08, upper: 0.4 },
  { name: 'medium', lower: 0.4, upper: 0.6 },
  { name: 'easy', lower: 0.6, upper: 0.9 },
  { name: 'too_easy', lower: 0.9, upper: 1 },
] as const;

export type BandName = (typeof BANDS)[number]['name'];
export type BandMasses = Record<BandName, number>;

export const BAND_NAMES: readonly BandName[] = BANDS.map((b) => b.name);
export const DEFAULT_RETAINED_BANDS: readonly BandName[] = ['hard', 'medium', 'easy'];
export const DEFAULT_MIN_CLEAN_RUNS = 3;
export const DEFAULT_TEST_FRACTION = 0.2;
export const DEFAULT_SEED = 42;
export const CREDIBLE_LEVEL = 0.95;
/** Jeffreys prior Beta(1/2, 1/2). */
export const PRIOR = { alpha: 0.5, beta: 0.5 } as const;

export type RejectionReason = 'insufficient_clean_runs' | 'difficulty_not_retained';

export function isBandName(name: string): name is BandName {
  return (BAND_NAMES as readonly string[]).includes(name);
}

/** One probe outcome. A system-error row is counted but its success value is never read. */
export type ProbeOutcome = { uid: string; systemError: true } | { uid: string; systemError: false; success: boolean };

export interface UidCounts {
  uid: string;
  total_rows: number;
  clean_runs: number;
  successes: number;
  failures: number;
  system_errors: number;
}

export interface Assessment extends UidCounts {
  pass_rate: number;
  standard_error: number;
  posterior_alpha: number;
  posterior_beta: number;
  posterior_band_masses: BandMasses;
  credible_interval: [number, number];
  difficulty: BandName;
  difficulty_mass: number;
}

export interface AssessedRow extends Assessment {
  eligible: boolean;
  rejection_reasons: RejectionReason[];
}

/** Counts per uid, sorted by uid. Outcomes from several files simply add up. */
export function aggregateOutcomes(outcomes: Iterable<ProbeOutcome>): UidCounts[] {
  const byUid = new Map<string, UidCounts>();
  for (const outcome of outcomes) {
    let counts = byUid.get(outcome.uid);
    if (!counts) {
      counts = { uid: outcome.uid, total_rows: 0, clean_runs: 0, successes: 0, failures: 0, system_errors: 0 };
      byUid.set(outcome.uid, counts);
    }
    counts.total_rows += 1;
    if (outcome.systemError) {
      counts.system_errors += 1;
    } else {
      counts.clean_runs += 1;
      if (outcome.success) counts.successes += 1;
      else counts.failures += 1;
    }
  }
  return [...byUid.values()].sort((x, y) => compareStrings(x.uid, y.uid));
}

export function jeffreysPosterior(successes: number, cleanRuns: number): { alpha: number; beta: number } {
  if (!Number.isInteger(successes) || !Number.isInteger(cleanRuns) || successes < 0 || successes > cleanRuns) {
    throw new RangeError(
      `jeffreysPosterior: need integers 0 <= successes <= clean runs, got ${successes} of ${cleanRuns}`,
    );
  }
  return { alpha: successes + PRIOR.alpha, beta: cleanRuns - successes + PRIOR.beta };
}

/** Posterior mass of each band: I_upper(alpha, beta) - I_lower(alpha, beta). */
export function bandMasses(alpha: number, beta: number): BandMasses {
  const masses = {} as BandMasses;
  for (const band of BANDS) {
    masses[band.name] =
      regularizedIncompleteBeta(band.upper, alpha, beta) - regularizedIncompleteBeta(band.lower, alpha, beta);
  }
  return masses;
}

/** The band with the largest mass; on an exact tie the harder (earlier) band wins. */
export function pickDifficulty(masses: BandMasses): { difficulty: BandName; mass: number } {
  let best: BandName = BANDS[0].name;
  for (const band of BANDS) {
    if (masses[band.name] > masses[best]) best = band.name;
  }
  return { difficulty: best, mass: masses[best] };
}

/** Equal-tailed credible interval of Beta(alpha, beta). */
export function credibleInterval(alpha: number, beta: number, level = CREDIBLE_LEVEL): [number, number] {
  if (!(level > 0 && level < 1)) throw new RangeError(`credibleInterval: level must be in (0, 1), got ${level}`);
  const tail = (1 - level) / 2;
  return [inverseRegularizedIncompleteBeta(tail, alpha, beta), inverseRegularizedIncompleteBeta(1 - tail, alpha, beta)];
}

function validateCounts(counts: UidCounts): void {
  const { uid, total_rows, clean_runs, successes, failures, system_errors } = counts;
  for (const [name, value] of Object.entries({ total_rows, clean_runs, successes, failures, system_errors })) {
    if (!Number.isInteger(value) || value < 0)
      throw new RangeError(`uid ${uid}: ${name} must be a non-negative integer, got ${value}`);
  }
  if (clean_runs !== successes + failures || total_rows !== clean_runs + system_errors) {
    throw new RangeError(
      `uid ${uid}: inconsistent counts (clean ${clean_runs} != ${successes} + ${failures} or total ${total_rows} != ` +
        `${clean_runs} + ${system_errors})`,
    );
  }
}

/** Statistics of one uid; it needs at least one clean run. */
export function assess(counts: UidCounts): Assessment {
  validateCounts(counts);
  if (counts.clean_runs === 0) throw new RangeError(`uid ${counts.uid}: no clean runs to assess`);
  const n = counts.clean_runs;
  const p = counts.successes / n;
  const { alpha, beta } = jeffreysPosterior(counts.successes, n);
  const masses = bandMasses(alpha, beta);
  const { difficulty, mass } = pickDifficulty(masses);
  return {
    ...counts,
    pass_rate: p,
    standard_error: Math.sqrt((p * (1 - p)) / n),
    posterior_alpha: alpha,
    posterior_beta: beta,
    posterior_band_masses: masses,
    credible_interval: credibleInterval(alpha, beta),
    difficulty,
    difficulty_mass: mass,
  };
}

export interface SelectionOptions {
  /** Uids dropped before anything else (the benchmark list). */
  exclusions?: Iterable<string>;
  minCleanRuns?: number;
  retainedBands?: readonly BandName[];
}

export interface SelectionResult {
  /** Every assessed uid (clean_runs > 0, not excluded), sorted by uid, with eligibility. */
  rows: AssessedRow[];
  /** Eligible uids, sorted. */
  selected: string[];
  /** Excluded uids that appeared in the probe results, sorted. */
  excludedPresent: string[];
  /** Uids whose every row was a system error: they are never assessed. */
  systemErrorOnly: string[];
  rejections: Partial<Record<RejectionReason, number>>;
}

export function validateSelectionOptions(minCleanRuns: number, retainedBands: readonly string[]): void {
  if (!Number.isInteger(minCleanRuns) || minCleanRuns < 1)
    throw new RangeError(`min clean runs must be an integer >= 1, got ${minCleanRuns}`);
  if (retainedBands.length === 0) throw new RangeError('retained bands must not be empty');
  for (const band of retainedBands) {
    if (!isBandName(band)) throw new RangeError(`unknown band '${band}' (bands: ${BAND_NAMES.join(', ')})`);
  }
}

/**
 * Exclusions first, then uids without a clean run vanish, then each remaining uid is assessed and
 * rejected for too few clean runs or a band that is not retained. An empty selection is allowed here;
 * the caller decides whether that is an error.
 */
export function selectTasks(counts: readonly UidCounts[], options: SelectionOptions = {}): SelectionResult {
  const minCleanRuns = options.minCleanRuns ?? DEFAULT_MIN_CLEAN_RUNS;
  const retained = options.retainedBands ?? DEFAULT_RETAINED_BANDS;
  validateSelectionOptions(minCleanRuns, retained);
  const exclusions = new Set(options.exclusions ?? []);
  const seen = new Set<string>();
  const rows: AssessedRow[] = [];
  const excludedPresent: string[] = [];
  const systemErrorOnly: string[] = [];
  const rejections: Partial<Record<RejectionReason, number>> = {};
  for (const c of [...counts].sort((x, y) => compareStrings(x.uid, y.uid))) {
    if (seen.has(c.uid)) throw new RangeError(`uid ${c.uid} appears twice in the aggregated counts`);
    seen.add(c.uid);
    if (exclusions.has(c.uid)) {
      excludedPresent.push(c.uid);
      continue;
    }
    validateCounts(c);
    if (c.clean_runs === 0) {
      systemErrorOnly.push(c.uid);
      continue;
    }
    const assessment = assess(c);
    const reasons: RejectionReason[] = [];
    if (c.clean_runs < minCleanRuns) reasons.push('insufficient_clean_runs');
    if (!retained.includes(assessment.difficulty)) reasons.push('difficulty_not_retained');
    for (const r of reasons) rejections[r] = (rejections[r] ?? 0) + 1;
    rows.push({ ...assessment, eligible: reasons.length === 0, rejection_reasons: reasons });
  }
  return {
    rows,
    selected: rows.filter((r) => r.eligible).map((r) => r.uid),
    excludedPresent,
    systemErrorOnly,
    rejections,
  };
}

/** Dataset group of a uid: the dataset file, i.e. the part before the first ':' ('' when there is none). */
export function datasetGroup(uid: string): string {
  const i = uid.indexOf(':');
  return i < 0 ? '' : uid.slice(0, i);
}

/** Code-unit order, independent of locale (the same order Python's sorted() gives for ASCII uids). */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

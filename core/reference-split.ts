import { createHash } from 'node:crypto';
import { regularizedIncompleteBeta } from './special-functions.ts';
import { compareStrings, DEFAULT_SEED, DEFAULT_TEST_FRACTION, type AssessedRow } from './difficulty.ts';

/**
 * The train/test split of `tbt prepare --mode split`, the reference's rule (its prepare_data.py `--mode split`,
 * docs/reference-rules.md §1), so that the same probe results and seed give the same test uids there and here.
 * Pure: rows in, uid lists out.
 *
 * Per dataset group (the uid before its first ':'): a group of one stays in train; otherwise
 * target = min(n - 1, max(1, ceil(n * fraction))) uids go to test. Rows are stratified by difficulty band, training
 * value, pass-rate bin and clean-run bin. When every stratum holds two or more rows and the target covers one per
 * stratum, each stratum sends max(1, floor(size * fraction)) (at most size - 1) of its best-ranked uids, the largest
 * quotas giving one back while the sum exceeds the target; whatever the target still lacks comes from the group's
 * remaining uids by a second ranking. Ranks are sha256 digests of the seed, the group, the stratum and the uid, so
 * input order never matters.
 */

export type SplitRow = Pick<
  AssessedRow,
  'uid' | 'difficulty' | 'successes' | 'clean_runs' | 'pass_rate' | 'credible_interval'
>;

/** The reference's label of how much a task is worth training on; one part of its split stratum. */
export type TrainingValue =
  'highest_value' | 'high_value' | 'easy_value' | 'low_value' | 'insufficient_data' | 'very_hard';

export interface SplitOptions {
  testFraction?: number;
  seed?: number;
}

/** Mass of the Jeffreys posterior below `upper`, the same posterior the difficulty bands use. */
function posteriorMassBelow(successes: number, cleanRuns: number, upper: number): number {
  return regularizedIncompleteBeta(upper, successes + 0.5, cleanRuns - successes + 0.5);
}

export function trainingValue(row: Omit<SplitRow, 'uid' | 'pass_rate'>): TrainingValue {
  const { difficulty, successes, clean_runs: n } = row;
  if (difficulty === 'too_easy') return 'low_value';
  if (difficulty === 'easy') return 'easy_value';
  if (difficulty === 'medium') return 'high_value';
  // hard and too_hard: never solved in 3 or more runs and almost surely below 15% is "very hard".
  if (successes === 0 && n >= 3) {
    if (row.credible_interval[1] <= 0.15 || posteriorMassBelow(successes, n, 0.15) >= 0.9) return 'very_hard';
  }
  return n >= 3 ? 'highest_value' : 'insufficient_data';
}

function passRateBin(p: number): string {
  if (p === 0) return 'zero';
  if (p < 0.25) return 'low';
  return p < 0.75 ? 'medium' : 'high';
}

function cleanRunBin(n: number): string {
  if (n <= 3) return 'few';
  return n <= 10 ? 'medium' : 'many';
}

/** The stratum of a row: `difficulty|training value|pass-rate bin|clean-run bin`. */
export function splitStratum(row: Omit<SplitRow, 'uid'>): string {
  return [row.difficulty, trainingValue(row), passRateBin(row.pass_rate), cleanRunBin(row.clean_runs)].join('|');
}

/** The dataset group of a uid for the split; uids without ':' share one group, named as the reference names it. */
export function splitGroup(uid: string): string {
  const i = uid.indexOf(':');
  return i < 0 ? 'single_dataset' : uid.slice(0, i);
}

/** Rank of a uid within a ranking `key` (group and stratum, or group and "fallback"): smaller goes to test first. */
export function splitRank(seed: number, key: string, uid: string): string {
  const keySeed = BigInt(`0x${sha256Hex(`${seed}\0${key}`).slice(0, 16)}`);
  return sha256Hex(`${keySeed.toString()}\0${uid}`);
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function ranked(rows: readonly SplitRow[], seed: number, key: string): SplitRow[] {
  const withRank = rows.map((row) => ({ row, rank: splitRank(seed, key, row.uid) }));
  return withRank.sort((x, y) => compareStrings(x.rank, y.rank)).map((x) => x.row);
}

/** Test uids of one group, in the order the rule picks them. */
function groupTestUids(groupKey: string, group: readonly SplitRow[], fraction: number, seed: number): string[] {
  const target = Math.min(group.length - 1, Math.max(1, Math.ceil(group.length * fraction)));
  const strata = new Map<string, SplitRow[]>();
  for (const row of group) {
    const key = splitStratum(row);
    const stratum = strata.get(key);
    if (stratum) stratum.push(row);
    else strata.set(key, [row]);
  }
  const picked: string[] = [];
  if ([...strata.values()].every((s) => s.length >= 2) && target >= strata.size) {
    const quotas = new Map(
      [...strata].map(([key, rows]) => [
        key,
        Math.min(rows.length - 1, Math.max(1, Math.floor(rows.length * fraction))),
      ]),
    );
    const total = () => [...quotas.values()].reduce((sum, q) => sum + q, 0);
    while (total() > target) {
      const above = [...quotas].filter(([, q]) => q > 1);
      if (above.length === 0) break;
      // The largest quota gives one back; on a tie the stratum whose key sorts last.
      const [key] = above.reduce((best, e) => (e[1] > best[1] || (e[1] === best[1] && e[0] > best[0]) ? e : best));
      quotas.set(key, quotas.get(key)! - 1);
    }
    for (const key of [...strata.keys()].sort(compareStrings)) {
      const order = ranked(strata.get(key)!, seed, `${groupKey}\0${key}`);
      picked.push(...order.slice(0, quotas.get(key)).map((r) => r.uid));
    }
  }
  if (picked.length < target) {
    const taken = new Set(picked);
    const rest = group.filter((r) => !taken.has(r.uid));
    picked.push(
      ...ranked(rest, seed, `${groupKey}\0fallback`)
        .slice(0, target - picked.length)
        .map((r) => r.uid),
    );
  }
  return picked.slice(0, target);
}

/** The split of the selected rows: sorted train and test uid lists (test may be empty; the caller decides). */
export function referenceSplit(
  rows: readonly SplitRow[],
  options: SplitOptions = {},
): { train: string[]; test: string[] } {
  const fraction = options.testFraction ?? DEFAULT_TEST_FRACTION;
  const seed = options.seed ?? DEFAULT_SEED;
  if (!(fraction > 0 && fraction < 1)) throw new RangeError(`test fraction must be in (0, 1), got ${fraction}`);
  if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be an integer, got ${seed}`);
  if (rows.length === 0) throw new RangeError('cannot split an empty selection');
  // Rows in uid order, as the reference assesses them: stratum and fallback candidates then never follow input order.
  const sorted = [...rows].sort((x, y) => compareStrings(x.uid, y.uid));
  const groups = new Map<string, SplitRow[]>();
  for (const [i, row] of sorted.entries()) {
    if (i > 0 && sorted[i - 1]!.uid === row.uid) throw new RangeError(`split input holds uid ${row.uid} twice`);
    const key = splitGroup(row.uid);
    const group = groups.get(key);
    if (group) group.push(row);
    else groups.set(key, [row]);
  }
  const test = new Set<string>();
  for (const [key, group] of groups) {
    if (group.length > 1) for (const uid of groupTestUids(key, group, fraction, seed)) test.add(uid);
  }
  const all = sorted.map((r) => r.uid);
  return { train: all.filter((u) => !test.has(u)), test: all.filter((u) => test.has(u)) };
}

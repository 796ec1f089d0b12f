import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  aggregateOutcomes,
  assess,
  bandMasses,
  BAND_NAMES,
  credibleInterval,
  jeffreysPosterior,
  pickDifficulty,
  selectTasks,
  type BandMasses,
  type ProbeOutcome,
  type UidCounts,
} from '../../core/difficulty.ts';

function counts(uid: string, successes: number, failures: number, systemErrors = 0): UidCounts {
  return {
    uid,
    total_rows: successes + failures + systemErrors,
    clean_runs: successes + failures,
    successes,
    failures,
    system_errors: systemErrors,
  };
}

test('3 of 8 probes -> Beta(3.5, 5.5) -> 54.0% of the mass in "hard" -> kept (the published example)', () => {
  const posterior = jeffreysPosterior(3, 8);
  assert.deepEqual(posterior, { alpha: 3.5, beta: 5.5 });
  const masses = bandMasses(posterior.alpha, posterior.beta);
  assert.equal((100 * masses.hard).toFixed(1), '54.0');
  // scipy.special.betainc differences for Beta(3.5, 5.5)
  const expected: BandMasses = {
    too_hard: 0.0071957374759716464,
    hard: 0.539624754637982,
    medium: 0.35485530087402783,
    easy: 0.0982173253934907,
    too_easy: 0.00010688161852778766,
  };
  for (const band of BAND_NAMES) assert.ok(Math.abs(masses[band] - expected[band]) < 1e-12, `${band}: ${masses[band]}`);
  assert.ok(Math.abs(BAND_NAMES.reduce((s, b) => s + masses[b], 0) - 1) < 1e-12);
  const a = assess(counts('x.py:t', 3, 5));
  assert.equal(a.difficulty, 'hard');
  assert.equal(a.difficulty_mass, masses.hard);
  assert.equal(a.pass_rate, 0.375);
  assert.equal(a.standard_error, Math.sqrt((0.375 * 0.625) / 8));
  const { selected } = selectTasks([counts('x.py:t', 3, 5)]);
  assert.deepEqual(selected, ['x.py:t']);
});

test('95% equal-tailed credible interval matches scipy betaincinv', () => {
  const [lo, hi] = credibleInterval(3.5, 5.5);
  assert.ok(Math.abs(lo - 0.1190391801541659) < 1e-12, String(lo));
  assert.ok(Math.abs(hi - 0.7051765537196912) < 1e-12, String(hi));
  const [lo0, hi0] = credibleInterval(0.5, 8.5); // 0 of 8
  assert.ok(Math.abs(lo0 - 5.949030289440215e-5) < 1e-15, String(lo0));
  assert.ok(Math.abs(hi0 - 0.2622172487171857) < 1e-12, String(hi0));
});

test('difficulty bands of hand-picked counts (0/8 too_hard, 4/8 medium, 6/8 easy, 8/8 too_easy)', () => {
  assert.equal(assess(counts('a', 0, 8)).difficulty, 'too_hard');
  assert.equal(assess(counts('a', 4, 4)).difficulty, 'medium');
  assert.equal(assess(counts('a', 6, 2)).difficulty, 'easy');
  assert.equal(assess(counts('a', 8, 0)).difficulty, 'too_easy');
  assert.equal(assess(counts('a', 10, 10)).difficulty, 'medium');
});

test('an exact tie goes to the harder band', () => {
  const base: BandMasses = { too_hard: 0.1, hard: 0.1, medium: 0.1, easy: 0.1, too_easy: 0.1 };
  assert.equal(pickDifficulty(base).difficulty, 'too_hard');
  assert.equal(pickDifficulty({ ...base, hard: 0.35, medium: 0.35 }).difficulty, 'hard');
  assert.equal(pickDifficulty({ ...base, medium: 0.3, easy: 0.3 }).difficulty, 'medium');
  assert.equal(pickDifficulty({ ...base, easy: 0.45, too_easy: 0.45 }).difficulty, 'easy');
  // Without a tie the larger mass wins, even by a hair.
  assert.equal(pickDifficulty({ ...base, medium: 0.3, easy: 0.30000000000000004 }).difficulty, 'easy');
});

test('aggregation counts system errors without reading their success, and several sources add up', () => {
  const outcomes: ProbeOutcome[] = [
    { uid: 'b.py:t', systemError: false, success: true },
    { uid: 'a.py:t', systemError: true },
    { uid: 'b.py:t', systemError: false, success: false },
    { uid: 'a.py:t', systemError: true },
    { uid: 'b.py:t', systemError: true },
  ];
  assert.deepEqual(aggregateOutcomes(outcomes), [
    { uid: 'a.py:t', total_rows: 2, clean_runs: 0, successes: 0, failures: 0, system_errors: 2 },
    { uid: 'b.py:t', total_rows: 3, clean_runs: 2, successes: 1, failures: 1, system_errors: 1 },
  ]);
});

test('selection: exclusions first, system-error-only uids vanish, reasons recorded', () => {
  const result = selectTasks(
    [
      counts('bench.py:t1', 4, 4), // medium, but on the exclusion list
      counts('r.py:se', 0, 0, 5), // only system errors
      counts('r.py:few', 1, 1), // 2 clean runs < 3
      counts('r.py:easy', 8, 0), // too_easy
      counts('r.py:both', 2, 0, 3), // 2 clean runs and too_easy
      counts('r.py:hard', 3, 5),
      counts('r.py:medium', 4, 4),
    ],
    { exclusions: ['bench.py:t1', 'not-present'] },
  );
  assert.deepEqual(result.excludedPresent, ['bench.py:t1']);
  assert.deepEqual(result.systemErrorOnly, ['r.py:se']);
  assert.deepEqual(
    result.rows.map((r) => r.uid),
    ['r.py:both', 'r.py:easy', 'r.py:few', 'r.py:hard', 'r.py:medium'],
  );
  const reasons = Object.fromEntries(result.rows.map((r) => [r.uid, r.rejection_reasons]));
  assert.deepEqual(reasons, {
    'r.py:both': ['insufficient_clean_runs', 'difficulty_not_retained'],
    'r.py:easy': ['difficulty_not_retained'],
    'r.py:few': ['insufficient_clean_runs'],
    'r.py:hard': [],
    'r.py:medium': [],
  });
  assert.deepEqual(result.selected, ['r.py:hard', 'r.py:medium']);
  assert.deepEqual(result.rejections, { insufficient_clean_runs: 2, difficulty_not_retained: 2 });
  assert.ok(result.rows.every((r) => r.eligible === (r.rejection_reasons.length === 0)));
});

test('selection options: min clean runs and retained bands', () => {
  const rows = [counts('a', 1, 1), counts('b', 3, 5), counts('c', 8, 0)];
  assert.deepEqual(selectTasks(rows, { minCleanRuns: 2 }).selected, ['a', 'b']);
  assert.deepEqual(selectTasks(rows, { retainedBands: ['too_easy'] }).selected, ['c']);
  assert.throws(() => selectTasks(rows, { minCleanRuns: 0 }), /min clean runs/);
  assert.throws(() => selectTasks(rows, { retainedBands: [] }), /must not be empty/);
});

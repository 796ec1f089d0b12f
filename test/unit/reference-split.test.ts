import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { prepare } from '../../cli/commands/prepare.ts';
import { BAND_NAMES, selectTasks, type UidCounts } from '../../core/difficulty.ts';
import { referenceSplit, splitStratum } from '../../core/reference-split.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * `tbt prepare --mode split` splits as the reference's prepare_data.py does (docs/reference-rules.md §1). The
 * expected test uids below are what the reference's own split gives for these probe counts (computed once with
 * its code and scipy, outside this repository): strata of difficulty, training value, pass-rate and clean-run bins,
 * per-stratum quotas (one quota giving one back in bank.py), the fallback ranking (travel.py has a stratum of one),
 * the uids without ':' as one group, and a group of one kept in train.
 */

/** [uid, successes, clean runs]. */
const probeCounts: [string, number, number][] = [
  ['retail.py:hard-0', 2, 8],
  ['retail.py:hard-1', 2, 8],
  ['retail.py:hard-2', 2, 8],
  ['retail.py:hard-3', 2, 8],
  ['retail.py:medium-0', 4, 8],
  ['retail.py:medium-1', 4, 8],
  ['retail.py:medium-2', 4, 8],
  ['retail.py:medium-3', 4, 8],
  ['retail.py:easy-0', 6, 8],
  ['retail.py:easy-1', 6, 8],
  ['retail.py:easy-2', 6, 8],
  ['retail.py:easy-3', 6, 8],
  ['travel.py:t0', 3, 8],
  ['travel.py:t1', 3, 8],
  ['travel.py:t2', 3, 8],
  ['travel.py:t3', 3, 8],
  ['travel.py:t4', 3, 8],
  ['travel.py:rare', 1, 3],
  ['travel.py:lots', 10, 20],
  ['bank.py:a0', 1, 4],
  ['bank.py:a1', 1, 4],
  ['bank.py:b0', 4, 5],
  ['bank.py:b1', 4, 5],
  ['bank.py:c00', 5, 12],
  ['bank.py:c01', 5, 12],
  ['bank.py:c02', 5, 12],
  ['bank.py:c03', 5, 12],
  ['bank.py:c04', 5, 12],
  ['bank.py:c05', 5, 12],
  ['bank.py:c06', 5, 12],
  ['bank.py:c07', 5, 12],
  ['bank.py:c08', 5, 12],
  ['bank.py:c09', 5, 12],
  ['bank.py:c10', 5, 12],
  ['plain-0', 3, 6],
  ['plain-1', 3, 6],
  ['plain-2', 3, 6],
  ['plain-3', 3, 6],
  ['plain-4', 3, 6],
  ['solo.py:only', 2, 5],
  ['ops.py:never-0', 0, 20],
  ['ops.py:never-1', 0, 20],
  ['ops.py:never-2', 0, 20],
  ['ops.py:zero-0', 0, 3],
  ['ops.py:zero-1', 0, 3],
  ['ops.py:once-0', 0, 1],
  ['ops.py:once-1', 0, 1],
  ['ops.py:low-0', 1, 6],
  ['ops.py:low-1', 1, 6],
  ['ops.py:always-0', 8, 8],
  ['ops.py:always-1', 8, 8],
  ['ops.py:half', 1, 2],
];

const counts: UidCounts[] = probeCounts.map(([uid, k, n]) => ({
  uid,
  total_rows: n,
  clean_runs: n,
  successes: k,
  failures: n - k,
  system_errors: 0,
}));

// Every band and a single clean run retained, so the too_easy, too_hard and few-runs strata are split too.
const rows = selectTasks(counts, { minCleanRuns: 1, retainedBands: BAND_NAMES }).rows;

const referenceTest = [
  'bank.py:a0',
  'bank.py:b1',
  'bank.py:c00',
  'ops.py:half',
  'ops.py:never-0',
  'ops.py:zero-1',
  'plain-1',
  'retail.py:easy-1',
  'retail.py:hard-3',
  'retail.py:medium-3',
  'travel.py:rare',
  'travel.py:t1',
];

const referenceTestSeed7Fraction03 = [
  'bank.py:a1',
  'bank.py:b0',
  'bank.py:c02',
  'bank.py:c04',
  'bank.py:c05',
  'ops.py:always-0',
  'ops.py:half',
  'ops.py:once-1',
  'ops.py:zero-1',
  'plain-1',
  'plain-2',
  'retail.py:easy-3',
  'retail.py:hard-2',
  'retail.py:medium-2',
  'retail.py:medium-3',
  'travel.py:lots',
  'travel.py:rare',
  'travel.py:t3',
];

test("split: the test uids are the reference's (seed 42, fraction 0.2)", () => {
  assert.equal(rows.length, probeCounts.length);
  const split = referenceSplit(rows);
  assert.deepEqual(split.test, referenceTest);
  assert.equal(split.train.length + split.test.length, rows.length);
  assert.ok(split.train.includes('solo.py:only'), 'a group of one stays in train');
});

test("split: the test uids are the reference's (seed 7, fraction 0.3)", () => {
  assert.deepEqual(referenceSplit(rows, { seed: 7, testFraction: 0.3 }).test, referenceTestSeed7Fraction03);
});

test('split: strata as the reference forms them (band, training value, pass-rate bin, clean-run bin)', () => {
  const byUid = new Map(rows.map((r) => [r.uid, r]));
  for (const [uid, stratum] of [
    ['ops.py:never-0', 'too_hard|very_hard|zero|many'],
    ['ops.py:zero-0', 'too_hard|highest_value|zero|few'],
    ['ops.py:once-0', 'hard|insufficient_data|zero|few'],
    ['ops.py:low-0', 'hard|highest_value|low|medium'],
    ['ops.py:always-0', 'too_easy|low_value|high|medium'],
    ['ops.py:half', 'hard|insufficient_data|medium|few'],
    ['travel.py:lots', 'medium|high_value|medium|many'],
    ['plain-0', 'medium|high_value|medium|medium'],
  ] as const)
    assert.equal(splitStratum(byUid.get(uid)!), stratum, uid);
});

test('split: input order never matters; bad options and duplicate uids are refused', () => {
  const reversed = referenceSplit([...rows].reverse());
  assert.deepEqual(reversed, referenceSplit(rows));
  assert.throws(() => referenceSplit(rows, { testFraction: 1 }), /test fraction/);
  assert.throws(() => referenceSplit([rows[0]!, rows[0]!]), /twice/);
  assert.throws(() => referenceSplit([]), /empty selection/);
});

test("tbt prepare --mode split writes the reference's test uids", async () => {
  const dir = testTempDir('tbt-reference-split-');
  const probes = probeCounts.flatMap(([uid, k, n]) =>
    Array.from({ length: n }, (_, i) => JSON.stringify({ uid, test_result: { result: i < k } })),
  );
  fs.writeFileSync(path.join(dir, 'probes.jsonl'), probes.join('\n') + '\n');
  const out = path.join(dir, 'out');
  const bands = BAND_NAMES.flatMap((b) => ['--retain-band', b]);
  const args = ['--policy', path.join(dir, 'probes.jsonl'), '--mode', 'split', '--min-clean-runs', '1', ...bands];
  const stderr: string[] = [];
  const code = await prepare([...args, '--output-dir', out], { out: () => {}, err: (t) => stderr.push(t) });
  assert.equal(code, 0, stderr.join('\n'));
  const written = fs.readFileSync(path.join(out, 'test.yaml'), 'utf8');
  assert.equal(written, referenceTest.map((u) => `- ${u}\n`).join(''));
});

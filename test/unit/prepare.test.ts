import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import type { CommandIo } from '../../cli/command-support.ts';
import { prepare } from '../../cli/commands/prepare.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'prepare');
const fixture = (name: string) => path.join(fixtures, name);

function capture(): CommandIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (t) => stdout.push(t), err: (t) => stderr.push(t) };
}

function tempDir(): string {
  return testTempDir('tbt-prepare-');
}

const read = (dir: string, name: string) => fs.readFileSync(path.join(dir, name), 'utf8');
const sha = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');
const probeArgs = [
  '--policy',
  fixture('probe-a.jsonl'),
  '--policy',
  fixture('probe-b.jsonl'),
  '--system-error-field',
  'is_system_error',
];

test('selection from two probe files with an exclusion list: outputs, counts and manifest', async () => {
  const out = tempDir();
  const io = capture();
  const code = await prepare([...probeArgs, '--exclude-uids', fixture('exclude.yaml'), '--output-dir', out], io);
  assert.equal(code, 0, io.stderr.join('\n'));
  assert.equal(read(out, 'selected.yaml'), '- retail.py:t1\n- retail.py:t4\n- travel.py:t1\n');

  const lines = read(out, 'aggregates.jsonl').trimEnd().split('\n');
  for (const line of lines) assert.equal(canonicalJson(JSON.parse(line)), line, 'each line is canonical JSON');
  const rows = lines.map((l) => JSON.parse(l));
  // bench.py:t1 is excluded; travel.py:t2 had only system errors: both vanish.
  assert.deepEqual(
    rows.map((r) => r.uid),
    ['retail.py:t1', 'retail.py:t2', 'retail.py:t3', 'retail.py:t4', 'retail.py:t5', 'travel.py:t1'],
  );
  const byUid = Object.fromEntries(rows.map((r) => [r.uid, r]));
  const t1 = byUid['retail.py:t1'];
  assert.equal(t1.difficulty, 'hard');
  assert.equal((100 * t1.difficulty_mass).toFixed(1), '54.0');
  assert.deepEqual([t1.posterior_alpha, t1.posterior_beta], [3.5, 5.5]);
  assert.equal(t1.eligible, true);
  assert.deepEqual(t1.rejection_reasons, []);
  assert.deepEqual(Object.keys(t1).sort(), [
    'clean_runs',
    'credible_interval',
    'difficulty',
    'difficulty_mass',
    'eligible',
    'failures',
    'pass_rate',
    'posterior_alpha',
    'posterior_band_masses',
    'posterior_beta',
    'rejection_reasons',
    'standard_error',
    'successes',
    'system_errors',
    'total_rows',
    'uid',
  ]);
  const t5 = byUid['retail.py:t5'];
  assert.deepEqual([t5.total_rows, t5.clean_runs, t5.successes, t5.failures, t5.system_errors], [3, 2, 1, 1, 1]);
  assert.deepEqual(t5.rejection_reasons, ['insufficient_clean_runs']);
  assert.deepEqual(byUid['retail.py:t3'].rejection_reasons, ['difficulty_not_retained']);
  // travel.py:t1 has 4 rows in each file: they add up to 6 of 8.
  assert.deepEqual([byUid['travel.py:t1'].clean_runs, byUid['travel.py:t1'].successes], [8, 6]);

  const manifest = JSON.parse(read(out, 'manifest.json'));
  assert.equal(manifest.schema_version, 1);
  assert.deepEqual(
    manifest.bands.map((b: { name: string }) => b.name),
    ['too_hard', 'hard', 'medium', 'easy', 'too_easy'],
  );
  assert.equal(manifest.configuration.min_clean_runs, 3);
  assert.deepEqual(manifest.configuration.retained_bands, ['hard', 'medium', 'easy']);
  assert.equal(manifest.summary.excluded_uids_present, 1);
  assert.equal(manifest.summary.system_error_only_uids, 1);
  assert.equal(manifest.summary.selected_uids, 3);
  assert.equal(manifest.summary.input_rows, 54);
  for (const name of ['selected.yaml', 'aggregates.jsonl'])
    assert.equal(manifest.outputs[name].sha256, sha(read(out, name)), name);
  assert.equal(manifest.inputs.policy[0].sha256, sha(fs.readFileSync(fixture('probe-a.jsonl'))));
  assert.equal(manifest.inputs.policy[1].sha256, sha(fs.readFileSync(fixture('probe-b.jsonl'))));
  assert.equal(manifest.inputs.exclude_uids.sha256, sha(fs.readFileSync(fixture('exclude.yaml'))));
});

test(
  'an exclusion list as plain lines works like the YAML list; without it the benchmark task is ' + 'selected',
  async () => {
    const withText = tempDir();
    assert.equal(
      await prepare([...probeArgs, '--exclude-uids', fixture('exclude.txt'), '--output-dir', withText], capture()),
      0,
    );
    assert.equal(read(withText, 'selected.yaml'), '- retail.py:t1\n- retail.py:t4\n- travel.py:t1\n');
    const without = tempDir();
    assert.equal(await prepare([...probeArgs, '--output-dir', without], capture()), 0);
    assert.match(read(without, 'selected.yaml'), /^- bench\.py:t1$/m);
  },
);

test('--min-clean-runs and --retain-band change the selection', async () => {
  const out = tempDir();
  assert.equal(
    await prepare(
      [
        ...probeArgs,
        '--exclude-uids',
        fixture('exclude.yaml'),
        '--min-clean-runs',
        '2',
        '--retain-band',
        'hard',
        '--output-dir',
        out,
      ],
      capture(),
    ),
    0,
  );
  assert.equal(read(out, 'selected.yaml'), '- retail.py:t1\n- retail.py:t5\n');
});

function writeProbes(file: string, rows: object[]): void {
  fs.writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
}

function splitProbeRows(): object[] {
  const rows: object[] = [];
  const add = (uid: string, k: number, n: number) => {
    for (let i = 0; i < n; i++) rows.push({ uid, test_result: { result: i < k } });
  };
  for (let i = 0; i < 8; i++) add(`retail.py:h${i}`, 2, 8);
  for (let i = 0; i < 6; i++) add(`retail.py:m${i}`, 4, 8);
  for (let i = 0; i < 5; i++) add(`travel.py:e${i}`, 6, 8);
  add('solo.py:only', 3, 8);
  return rows;
}

test('split mode: train/test do not change when the input rows are shuffled', async () => {
  const dir = tempDir();
  const rows = splitProbeRows();
  writeProbes(path.join(dir, 'ordered.jsonl'), rows);
  const shuffled = [...rows];
  let s = 12345;
  for (let i = shuffled.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2147483648;
    const j = s % (i + 1);
    [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
  }
  writeProbes(path.join(dir, 'shuffled.jsonl'), shuffled);
  assert.notEqual(
    fs.readFileSync(path.join(dir, 'ordered.jsonl'), 'utf8'),
    fs.readFileSync(path.join(dir, 'shuffled.jsonl'), 'utf8'),
  );

  const outA = path.join(dir, 'a');
  const outB = path.join(dir, 'b');
  assert.equal(
    await prepare(['--policy', path.join(dir, 'ordered.jsonl'), '--mode', 'split', '--output-dir', outA], capture()),
    0,
  );
  assert.equal(
    await prepare(['--policy', path.join(dir, 'shuffled.jsonl'), '--mode', 'split', '--output-dir', outB], capture()),
    0,
  );
  for (const name of ['train.yaml', 'test.yaml', 'aggregates.jsonl'])
    assert.equal(read(outA, name), read(outB, name), name);
  assert.ok(!fs.existsSync(path.join(outA, 'selected.yaml')));

  const train = read(outA, 'train.yaml');
  const testList = read(outA, 'test.yaml');
  assert.match(train, /^- solo\.py:only$/m, 'a group of one goes to train');
  // retail: 14 uids -> ceil(2.8) = 3 to test (8 hard, 6 medium: 2 hard + 1 medium); travel: 5 -> 1.
  const testUids = testList
    .trimEnd()
    .split('\n')
    .map((l) => l.slice(2));
  assert.equal(testUids.filter((u) => u.startsWith('retail.py:h')).length, 2);
  assert.equal(testUids.filter((u) => u.startsWith('retail.py:m')).length, 1);
  assert.equal(testUids.filter((u) => u.startsWith('travel.py:')).length, 1);
  const manifest = JSON.parse(read(outA, 'manifest.json'));
  assert.deepEqual([manifest.summary.train_uids, manifest.summary.test_uids], [16, 4]);
  assert.equal(manifest.configuration.seed, 42);
  assert.equal(manifest.outputs['test.yaml'].sha256, sha(testList));

  const outSeed = path.join(dir, 'seed');
  assert.equal(
    await prepare(
      ['--policy', path.join(dir, 'ordered.jsonl'), '--mode', 'split', '--seed', '7', '--output-dir', outSeed],
      capture(),
    ),
    0,
  );
  assert.equal(read(outSeed, 'train.yaml').split('\n').length, train.split('\n').length);
});

async function failing(args: string[]): Promise<{ code: number; stderr: string; out: string }> {
  const out = tempDir();
  const io = capture();
  const code = await prepare([...args, '--output-dir', out], io);
  assert.equal(io.stdout.length, 0, 'nothing is reported on failure');
  assert.deepEqual(fs.readdirSync(out), [], 'no output is written on failure');
  return { code, stderr: io.stderr.join('\n'), out };
}

test('a non-boolean success names file, line and field', async () => {
  const r = await failing(['--policy', fixture('non-boolean.jsonl')]);
  assert.equal(r.code, 1);
  assert.equal(r.stderr, `${fixture('non-boolean.jsonl')}:7: field test_result.result: expected a boolean, got "yes"`);
});

test('a bad JSON line names file and line', async () => {
  const r = await failing(['--policy', fixture('bad-json.jsonl')]);
  assert.equal(r.code, 1);
  assert.ok(r.stderr.startsWith(`${fixture('bad-json.jsonl')}:3: invalid JSON`), r.stderr);
});

test('a missing field names file, line, field and where the path broke', async () => {
  const r = await failing(['--policy', fixture('missing-field.jsonl')]);
  assert.equal(r.code, 1);
  assert.equal(
    r.stderr,
    `${fixture('missing-field.jsonl')}:2: field test_result.result: missing (no key "test_result")`,
  );
  const se = await failing(['--policy', fixture('probe-a.jsonl'), '--system-error-field', 'status.error']);
  assert.match(se.stderr, /probe-a\.jsonl:1: field status\.error: missing \(no key "status"\)/);
  const uid = await failing(['--policy', fixture('probe-a.jsonl'), '--uid-field', 'task_id']);
  assert.match(uid.stderr, /probe-a\.jsonl:1: field task_id: missing/);
});

test('system-error rows are not read for success, but only when the system-error field is given', async () => {
  // Without --system-error-field the null test_result of a system-error row is an error...
  const r = await failing(['--policy', fixture('probe-a.jsonl')]);
  assert.match(r.stderr, /probe-a\.jsonl:2: field test_result\.result: missing \(test_result is null, not an object\)/);
  // ...with it, the same file is fine.
  assert.equal(
    await prepare(
      ['--policy', fixture('probe-a.jsonl'), '--system-error-field', 'is_system_error', '--output-dir', tempDir()],
      capture(),
    ),
    0,
  );
});

test('an empty selection is an error that says why', async () => {
  const r = await failing([...probeArgs, '--retain-band', 'too_easy', '--min-clean-runs', '9']);
  assert.equal(r.code, 1);
  assert.match(
    r.stderr,
    /^empty selection: none of 7 assessed uids is eligible \(insufficient_clean_runs: 7, difficulty_not_retained: 6/,
  );
});

test('bad flags exit 2 with usage', async () => {
  const band = await failing([...probeArgs, '--retain-band', 'trivial']);
  assert.equal(band.code, 2);
  assert.match(band.stderr, /--retain-band: unknown band 'trivial'/);
  assert.match(band.stderr, /usage: tbt prepare/);
  assert.equal((await failing([...probeArgs, '--min-clean-runs', 'three'])).code, 2);
  assert.equal((await failing([...probeArgs, '--test-fraction', '1.5', '--mode', 'split'])).code, 2);
  assert.equal((await failing(['--no-such-flag'])).code, 2);
  const missing = await failing([]);
  assert.match(missing.stderr, /--policy FILE is required/);
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { evaluate } from '../../cli/commands/eval.ts';
import type { CommandIo } from '../../cli/command-support.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'eval');
const fixture = (name: string) => path.join(fixtures, name);

function capture(): CommandIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (t) => stdout.push(t), err: (t) => stderr.push(t) };
}

const tempDir = () => testTempDir('tbt-eval-');
const close = (actual: number, expected: number, tolerance = 1e-12) =>
  assert.ok(Math.abs(actual - expected) <= tolerance, `expected ${expected}, got ${actual}`);

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const io = capture();
  const code = await evaluate(args, io);
  return { code, stdout: io.stdout.join('\n'), stderr: io.stderr.join('\n') };
}

test('aggregate our episode records: hand-computed scores and cost', async () => {
  const out = path.join(tempDir(), 'report.json');
  const r = await run([
    'aggregate',
    '--results',
    fixture('episodes.jsonl'),
    '--repeats',
    '4',
    '--prices',
    fixture('prices.yaml'),
    '--out',
    out,
  ]);
  assert.equal(r.code, 0, r.stderr);
  const report = JSON.parse(fs.readFileSync(out, 'utf8'));
  // retail/t1 4 of 4, retail/t2 2 of 4, travel/t1 0 of 4
  assert.deepEqual(
    report.tasks.map((t: { uid: string; n: number; c: number }) => [t.uid, t.n, t.c]),
    [
      ['retail/t1', 4, 4],
      ['retail/t2', 4, 2],
      ['travel/t1', 4, 0],
    ],
  );
  close(report.overall.pass_at_1.estimate, 0.5);
  assert.deepEqual(
    report.overall.pass_at_k.map((x: { k: number }) => x.k),
    [1, 4],
  );
  close(report.overall.pass_at_k[1].estimate, 2 / 3);
  close(report.overall.pass_hat_k[1].estimate, 1 / 3);
  assert.equal(report.overall.observed_all_pass.count, 1);
  close(report.tasks[1].pass_hat_k['4'], 0);
  close(report.domains.retail.pass_at_1.estimate, 0.75);
  close(report.domains.travel.pass_at_1.estimate, 0);
  // Per attempt: policy (1000 x $1 + 200 x $4 + 500 x $0.25) / 1e6 = 0.001925,
  // user (300 x 0.5 + 50 x 1.5) / 1e6 = 0.000225, judge (100 x 2 + 5 x 8) / 1e6 = 0.00024; 12 attempts.
  close(report.cost.by_role.policy.cost, 12 * 0.001925);
  close(report.cost.by_role.user.cost, 12 * 0.000225);
  close(report.cost.by_role.judge.cost, 12 * 0.00024);
  assert.equal(report.schema_version, 2);
  assert.deepEqual([report.cost.passing_attempts, report.cost.reliable_tasks], [6, 1]);
  // Policy only (the reference's figure) counts the policy's tokens alone; all roles adds user and judge.
  close(report.cost.policy_only.campaign, 12 * 0.001925);
  close(report.cost.policy_only.per_successful_attempt, (12 * 0.001925) / 6);
  close(report.cost.policy_only.per_reliable_task, 12 * 0.001925);
  close(report.cost.all_roles.campaign, 12 * 0.00239);
  close(report.cost.all_roles.per_successful_attempt, (12 * 0.00239) / 6);
  close(report.cost.all_roles.per_reliable_task, 12 * 0.00239);
  assert.equal(report.cost.campaign, undefined, 'no unscoped figure');
  close(report.cost.domains.retail.policy_only.campaign, 8 * 0.001925);
  close(report.cost.domains.retail.all_roles.per_successful_attempt, (8 * 0.00239) / 6);
  assert.equal(report.cost.domains.travel.policy_only.per_reliable_task, null);
  assert.equal(report.cost.domains.travel.all_roles.per_successful_attempt, null);
  assert.match(r.stdout, /^coverage: 3 tasks x 4 repetitions = 12 attempts/);
  assert.match(r.stdout, /^all +3 +12 +50\.00% /m);
  // The table: policy only ($0.0231, $0.00385 shown as $0.0038, $0.0231), then all roles ($0.02868, $0.00478,
  // $0.02868).
  assert.match(
    r.stdout,
    /^domain .* cost, policy only +per success +per reliable +cost, all roles +per success +per reliable$/m,
  );
  assert.match(r.stdout, /^all .* \$0\.023 +\$0\.0038 +\$0\.023 +\$0\.029 +\$0\.0048 +\$0\.029$/m);
  assert.match(r.stdout, /^cost, divided by 6 passing attempts and 1 task at 4\/4:$/m);
  const lines = r.stdout.split('\n');
  assert.ok(
    lines.includes(
      "  policy only (the evaluated model's inference tokens, as the reference counts): campaign $0.023; " +
        'per successful attempt $0.0038; per reliable task $0.023',
    ),
    r.stdout,
  );
  assert.ok(
    lines.includes(
      '  all roles (policy + simulated user + judge tokens): campaign $0.029; per successful attempt $0.0048; ' +
        'per reliable task $0.029',
    ),
    r.stdout,
  );
});

test(
  "aggregate ThinkingBox result lines: repetition from metadata.repetition, domain from the uid's file, usage " +
    'lists',
  async () => {
    const out = path.join(tempDir(), 'tb.json');
    const r = await run([
      'aggregate',
      '--format',
      'thinkingbox',
      '--results',
      fixture('thinkingbox.jsonl'),
      '--repeats',
      '3',
      '--prices',
      fixture('prices.yaml'),
      '--out',
      out,
    ]);
    assert.equal(r.code, 0, r.stderr);
    const report = JSON.parse(fs.readFileSync(out, 'utf8'));
    assert.deepEqual(Object.keys(report.domains), ['sandbox_retail.py', 'sandbox_travel.py']);
    close(report.overall.pass_at_1.estimate, (1 + 1 / 3) / 2);
    close(report.overall.pass_hat_k.find((x: { k: number }) => x.k === 3).estimate, 0.5);
    close(report.overall.pass_at_k.find((x: { k: number }) => x.k === 3).estimate, 1);
    // 6 lines x usage {input 1200 of which 200 cached, output 300}
    assert.deepEqual(report.cost.by_role.policy.tokens, { input: 6000, cached_input: 1200, output: 1800 });
    close(report.cost.policy_only.campaign, (6000 * 1 + 1200 * 0.25 + 1800 * 4) / 1e6);
  },
);

async function gateFails(args: string[]): Promise<string> {
  const out = path.join(tempDir(), 'never.json');
  const r = await run([...args, '--out', out]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '', 'no score may be printed');
  assert.ok(!fs.existsSync(out), 'no report may be written');
  return r.stderr;
}

test('an infrastructure-error row fails the coverage gate, naming file and line', async () => {
  const stderr = await gateFails(['aggregate', '--results', fixture('episodes-infra.jsonl'), '--repeats', '4']);
  assert.match(stderr, /^coverage gate failed: 1 problem/);
  assert.ok(
    stderr.includes(
      `${fixture('episodes-infra.jsonl')}:5: uid retail/t2 repetition 1: infrastructure error (field ` +
        `infrastructure_error is true)`,
    ),
    stderr,
  );
  // ThinkingBox lines: a system error at the top level or in the test result both count.
  const dir = tempDir();
  const lines = fs
    .readFileSync(fixture('thinkingbox.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  lines[2].test_result.is_system_error = true;
  lines[3].is_system_error = true;
  lines[3].test_result = null;
  const file = path.join(dir, 'tb-errors.jsonl');
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  const tb = await gateFails(['aggregate', '--format', 'thinkingbox', '--results', file, '--repeats', '3']);
  assert.ok(
    tb.includes(
      `${file}:3: uid sandbox_retail.py:test_a repetition 1: infrastructure error (field test_result.is_system_error ` +
        `is true)`,
    ),
    tb,
  );
  assert.ok(
    tb.includes(
      `${file}:4: uid sandbox_travel.py:test_b repetition 1: infrastructure error (field is_system_error is true)`,
    ),
    tb,
  );
});

test('a task error passes the gate: its task is listed with the cause and left out of every score', async () => {
  const dir = tempDir();
  const lines = fs
    .readFileSync(fixture('episodes.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  // travel/t1 (0 of 4 passed) raises in its test on one repetition: out of the scores, so 6 of 8 pass.
  const row = lines.find((l) => l.uid === 'travel/t1' && l.repetition === 1);
  Object.assign(row, { task_error: true, success: false, cause: 'task error: IndexError at tests.py:7 twice' });
  const file = path.join(dir, 'with-task-error.jsonl');
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  const out = path.join(dir, 'report.json');
  const r = await run(['aggregate', '--results', file, '--repeats', '4', '--out', out]);
  assert.equal(r.code, 0, r.stderr);
  const report = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.deepEqual(report.task_errors, [
    { uid: 'travel/t1', keys: 1, cause: 'task error: IndexError at tests.py:7 twice' },
  ]);
  assert.equal(report.coverage.task_error_tasks, 1);
  assert.deepEqual(
    report.tasks.map((t: { uid: string }) => t.uid),
    ['retail/t1', 'retail/t2'],
  );
  close(report.overall.pass_at_1.estimate, 6 / 8);
  assert.match(r.stdout, /task errors: 1 task \(1 key\) left out of\s+every score/);
  assert.match(r.stdout, /travel\/t1 \(1 key\): task error: IndexError at tests\.py:7 twice/);
});

test('a duplicate (uid, repetition) key fails the coverage gate, naming both lines', async () => {
  const stderr = await gateFails(['aggregate', '--results', fixture('episodes-duplicate.jsonl'), '--repeats', '4']);
  assert.ok(
    stderr.includes(
      `${fixture('episodes-duplicate.jsonl')}:7: uid retail/t1 repetition 1: duplicate key, first seen at ` +
        `${fixture('episodes-duplicate.jsonl')}:4`,
    ),
    stderr,
  );
  assert.match(stderr, /uid retail\/t1: 3 distinct repetitions, expected --repeats 4/);
});

test('a count different from --repeats, or a task missing from --tasks, fails the gate', async () => {
  const five = await gateFails(['aggregate', '--results', fixture('episodes.jsonl'), '--repeats', '5']);
  assert.match(five, /^coverage gate failed: 3 problem/);
  assert.match(five, /episodes\.jsonl:1, .*: uid retail\/t1: 4 distinct repetitions, expected --repeats 5/);
  const dir = tempDir();
  const list = path.join(dir, 'tasks.yaml');
  fs.writeFileSync(list, '- retail/t1\n- retail/t2\n- travel/t1\n- travel/t9\n');
  const missing = await gateFails([
    'aggregate',
    '--results',
    fixture('episodes.jsonl'),
    '--repeats',
    '4',
    '--tasks',
    list,
  ]);
  assert.match(missing, /uid travel\/t9: no results \(expected 4 repetitions\)/);
  // The same results split over two files add up.
  const lines = fs.readFileSync(fixture('episodes.jsonl'), 'utf8').trimEnd().split('\n');
  fs.writeFileSync(path.join(dir, 'part1.jsonl'), lines.slice(0, 5).join('\n') + '\n');
  fs.writeFileSync(path.join(dir, 'part2.jsonl'), lines.slice(5).join('\n') + '\n');
  const ok = await run([
    'aggregate',
    '--results',
    path.join(dir, 'part1.jsonl'),
    '--results',
    path.join(dir, 'part2.jsonl'),
    '--repeats',
    '4',
    '--out',
    path.join(dir, 'o.json'),
  ]);
  assert.equal(ok.code, 0, ok.stderr);
});

test('malformed result lines name file, line and field', async () => {
  const dir = tempDir();
  const lines = fs.readFileSync(fixture('episodes.jsonl'), 'utf8').trimEnd().split('\n');
  const write = (name: string, edit: (rows: string[]) => void) => {
    const copy = [...lines];
    edit(copy);
    const file = path.join(dir, name);
    fs.writeFileSync(file, copy.join('\n') + '\n');
    return file;
  };
  const badJson = write('bad.jsonl', (l) => (l[3] = l[3]!.slice(0, -1)));
  assert.match(
    await gateFails(['aggregate', '--results', badJson, '--repeats', '4']),
    new RegExp(`^${escape(badJson)}:4: invalid JSON`),
  );
  const nonBool = write('nonbool.jsonl', (l) => (l[8] = l[8]!.replace('"success": false', '"success": "no"')));
  assert.equal(
    await gateFails(['aggregate', '--results', nonBool, '--repeats', '4']),
    `${nonBool}:9: field success: expected a boolean, got "no"`,
  );
  const noRep = write('norep.jsonl', (l) => (l[1] = l[1]!.replace('"repetition": 0, ', '')));
  assert.equal(
    await gateFails(['aggregate', '--results', noRep, '--repeats', '4']),
    `${noRep}:2: field repetition: missing (no key "repetition")`,
  );
  const badTokens = write('tokens.jsonl', (l) => (l[0] = l[0]!.replace('"output": 200', '"output": -1')));
  assert.match(
    await gateFails(['aggregate', '--results', badTokens, '--repeats', '4', '--prices', fixture('prices.yaml')]),
    new RegExp(`^${escape(badTokens)}:1: field tokens\\.policy\\.output: `),
  );
  const prices = await gateFails([
    'aggregate',
    '--results',
    fixture('episodes.jsonl'),
    '--repeats',
    '4',
    '--prices',
    fixture('bad-prices.yaml'),
  ]);
  assert.match(prices, /bad-prices\.yaml:5: judge\.output_per_million: /);
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

test("the reference's published numbers come out of 507 tasks x 20 repeats, as the policy-only figures", async () => {
  const dir = tempDir();
  const rows: string[] = [];
  for (let i = 0; i < 507; i++) {
    const c = i < 38 ? 20 : i < 38 + 332 ? 11 : i < 38 + 415 ? 10 : 0;
    for (let rep = 0; rep < 20; rep++) {
      // 91,301 input tokens per attempt at $1 per million, plus 7,860 once: $925.80 in all.
      const input = 91_301 + (i === 0 && rep === 0 ? 7_860 : 0);
      rows.push(
        JSON.stringify({
          uid: `d${i % 5}/t${i}`,
          repetition: rep,
          domain: `d${i % 5}`,
          success: rep < c,
          infrastructure_error: false,
          // The simulated user and the judge cost $50.70 and $20.28 more, which the reference does not count.
          tokens: {
            policy: { input, output: 0, cached_input: 0 },
            user: { input: 5_000, output: 0, cached_input: 0 },
            judge: { input: 1_000, output: 0, cached_input: 0 },
          },
        }),
      );
    }
  }
  fs.writeFileSync(path.join(dir, 'results.jsonl'), rows.join('\n') + '\n');
  const zero = { input_per_million: 0, output_per_million: 0, cached_input_per_million: 0 };
  fs.writeFileSync(
    path.join(dir, 'prices.yaml'),
    JSON.stringify({
      policy: { ...zero, input_per_million: 1 },
      user: { ...zero, input_per_million: 1 },
      judge: { ...zero, input_per_million: 2 },
    }),
  );
  const out = path.join(dir, 'report.json');
  const r = await run([
    'aggregate',
    '--results',
    path.join(dir, 'results.jsonl'),
    '--repeats',
    '20',
    '--prices',
    path.join(dir, 'prices.yaml'),
    '--out',
    out,
  ]);
  assert.equal(r.code, 0, r.stderr);
  const allRow = r.stdout.split('\n').find((l) => l.startsWith('all '))!;
  for (const cell of [
    '507',
    '10140',
    '51.70%',
    '89.35%',
    '38 (7.50%)',
    '453 (89.35%)',
    '$925.80',
    '$0.177',
    '$24.36',
    // All roles: $996.78 / 5,242 passing attempts and / 38 reliable tasks.
    '$996.78',
    '$0.190',
    '$26.23',
  ]) {
    assert.ok(allRow.includes(cell), `'${cell}' in: ${allRow}`);
  }
  assert.match(allRow, /\$925\.80 +\$0\.177 +\$24\.36 +\$996\.78 +\$0\.190 +\$26\.23$/, 'policy only, then all roles');
  const report = JSON.parse(fs.readFileSync(out, 'utf8'));
  close(report.cost.policy_only.campaign, 925.8, 1e-9);
  close(report.cost.policy_only.per_reliable_task, 925.8 / 38, 1e-9);
  close(report.cost.all_roles.campaign, 996.78, 1e-9);
  close(report.cost.all_roles.per_successful_attempt, 996.78 / 5242, 1e-9);
  close(report.cost.all_roles.per_reliable_task, 996.78 / 38, 1e-9);
  assert.equal(report.cost.reliable_tasks, 38);
  assert.equal(report.overall.successes, 5242);
});

test('compare: paired per-task differences of two aggregates, deterministic under a seed', async () => {
  const dir = tempDir();
  const a = path.join(dir, 'a.json');
  const b = path.join(dir, 'b.json');
  assert.equal(
    (await run(['aggregate', '--results', fixture('episodes.jsonl'), '--repeats', '4', '--out', a])).code,
    0,
  );
  // B: travel/t1 now passes 2 of 4.
  const lines = fs
    .readFileSync(fixture('episodes.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  for (const l of lines) if (l.uid === 'travel/t1' && l.repetition < 2) l.success = true;
  fs.writeFileSync(path.join(dir, 'b.jsonl'), lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  assert.equal(
    (await run(['aggregate', '--results', path.join(dir, 'b.jsonl'), '--repeats', '4', '--out', b])).code,
    0,
  );
  const out1 = path.join(dir, 'cmp1.json');
  const out2 = path.join(dir, 'cmp2.json');
  const r = await run(['compare', a, b, '--resamples', '2000', '--out', out1]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal((await run(['compare', a, b, '--resamples', '2000', '--out', out2])).code, 0);
  assert.equal(fs.readFileSync(out1, 'utf8').replace(/cmp1/g, ''), fs.readFileSync(out2, 'utf8').replace(/cmp2/g, ''));
  const cmp = JSON.parse(fs.readFileSync(out1, 'utf8'));
  close(cmp.pass_at_1.a, 0.5);
  close(cmp.pass_at_1.b, 2 / 3);
  close(cmp.pass_at_1.difference, 1 / 6);
  assert.equal(cmp.b_better, 1);
  assert.equal(cmp.equal, 2);
  assert.match(r.stdout, /pass@1 +50\.00% +66\.67% +\+16\.67 pts/);
  // Different task sets cannot be paired.
  const other = path.join(dir, 'other.json');
  fs.writeFileSync(
    other,
    JSON.stringify({ kind: 'tbt-eval-aggregate', tasks: [{ uid: 'retail/t1', domain: 'retail', n: 4, c: 1 }] }),
  );
  const mismatch = await run(['compare', a, other]);
  assert.equal(mismatch.code, 1);
  assert.match(mismatch.stderr, /2 only in A \(retail\/t2, travel\/t1\), 0 only in B/);
});

test('eval run and eval schedule without their required flags print usage and exit 2', async () => {
  const printed: string[] = [];
  const original = console.error;
  console.error = (...a: unknown[]) => void printed.push(a.join(' '));
  try {
    assert.equal((await run(['run'])).code, 2);
    assert.equal((await run(['schedule', '--campaign', 'x'])).code, 2);
  } finally {
    console.error = original;
  }
  assert.match(printed[0]!, /^usage: tbt eval run --config FILE/);
  assert.match(printed[1]!, /^usage: tbt eval schedule --campaign WORKFLOW_ID --config FILE --cron/);
});

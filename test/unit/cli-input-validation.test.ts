import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import { parseYamlFile } from '../../config/yaml-file.ts';
import { campaignConfigSchema } from '../../config/campaign-config.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** `tbt` as a user runs it, with no servers reachable (a flag must be refused before anything connects). */
function tbt(...args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'cli/tbt.ts', ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', TBT_TEMPORAL_ADDRESS: '127.0.0.1:1' },
    timeout: 60_000,
  });
  return { status: r.status, stderr: r.stderr };
}

const dir = testTempDir('tbt-flags-');
const bomb = path.join(dir, 'bomb.yaml');
// Seven levels of nine aliases: 9^7 (~4.8 million) nodes once expanded.
fs.writeFileSync(
  bomb,
  [
    'a: &a [x, x, x, x, x, x, x, x, x]',
    ...'bcdefg'.split('').map((l, i) => `${l}: &${l} [${`*${'abcdefg'[i]}, `.repeat(9).slice(0, -2)}]`),
  ].join('\n'),
);

test('finding 10: --concurrency abc and other bad numeric flags are refused naming the flag (exit 2)', () => {
  const cases: [string[], string][] = [
    [['tasks', 'validate', 'tasks/tiny', '--concurrency', 'abc'], '--concurrency'],
    [['tasks', 'validate', 'tasks/tiny', '--concurrency', '0'], '--concurrency'],
    [['episodes', 'run', '--suite', 'tasks/tiny', '--out', path.join(dir, 'o.jsonl'), '--repeats', '2x'], '--repeats'],
    [
      ['episodes', 'run', '--suite', 'tasks/tiny', '--out', path.join(dir, 'o.jsonl'), '--temperature', 'hot'],
      '--temperature',
    ],
    [
      ['episodes', 'run', '--suite', 'tasks/tiny', '--out', path.join(dir, 'o.jsonl'), '--max-agent-turns=-1'],
      '--max-agent-turns',
    ],
    [['eval', 'run', '--config', 'config/local.yaml', '--repeats', 'many'], '--repeats'],
    [
      ['episodes', 'run', '--suite', 'tasks/tiny', '--out', path.join(dir, 'o.jsonl'), '--policy-url', 'no url'],
      '--policy-url',
    ],
  ];
  for (const [args, flag] of cases) {
    const r = tbt(...args);
    assert.equal(r.status, 2, `${args.join(' ')}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stderr, new RegExp(`${flag}: expected`), args.join(' '));
    assert.doesNotMatch(r.stderr, /Cannot read properties/);
  }
});

test('finding 10: --tasks is checked (YAML or line list, every uid in the suite) naming the file', () => {
  const unknown = path.join(dir, 'unknown.yaml');
  fs.writeFileSync(unknown, '- no-such-task\n');
  let r = tbt('eval', 'run', '--config', 'config/local.yaml', '--tasks', unknown);
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--tasks .*unknown\.yaml: not in .*: no-such-task/);
  r = tbt('eval', 'run', '--config', 'config/local.yaml', '--tasks', bomb);
  assert.equal(r.status, 1, r.stderr);
  assert.ok(r.stderr.includes(bomb), r.stderr);
});

test('finding 10: a YAML alias bomb is reported with the file name, not thrown', () => {
  const parsed = parseYamlFile(bomb, campaignConfigSchema);
  assert.equal(parsed.value, undefined);
  assert.equal(parsed.problems[0]?.file, bomb);
  assert.match(parsed.problems[0]!.message, /alias/i);
  const r = tbt('train', '--config', bomb, '--dry-run');
  assert.equal(r.status, 1, r.stderr);
  assert.ok(r.stderr.includes(`${bomb}:1`), r.stderr);
});

test('the suite field takes a native or an imported suite, and names the field for anything else', () => {
  const local = fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8');
  const withSuite = (name: string, suite: string) => {
    const file = path.join(dir, `${name}.yaml`);
    fs.writeFileSync(file, local.replace(/^suite: .*$/m, `suite: ${suite}`).replace(/^prices: .*$/m, ''));
    return file;
  };
  const empty = fs.mkdtempSync(path.join(dir, 'not-a-suite-'));
  const refused = tbt('train', '--config', withSuite('none', empty), '--dry-run');
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /field suite: .* is not a task suite folder/);
  // An imported suite is its suite file (written by `tbt tasks import-thinkingbox`), with no scenarios/ folder.
  const imported = fs.mkdtempSync(path.join(dir, 'imported-'));
  fs.writeFileSync(path.join(imported, 'thinkingbox-suite.json'), '{}\n');
  const accepted = tbt('train', '--config', withSuite('imported', imported), '--dry-run');
  assert.doesNotMatch(accepted.stderr, /is not a task suite folder/);
});

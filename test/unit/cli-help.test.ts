import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';

const tbt = (...args: string[]) =>
  spawnSync(path.join(repoRoot, 'bin', 'tbt'), args, { encoding: 'utf8', timeout: 60_000, cwd: repoRoot });

// The help of `tbt eval` is checked against what each subcommand itself accepts: its own usage line, printed
// when it is called without arguments, names the flags it parses.
test('tbt eval --help describes every subcommand with the flags that subcommand accepts', () => {
  const help = tbt('eval', '--help').stdout;
  assert.doesNotMatch(help, /not built/i);
  for (const sub of ['run', 'schedule']) {
    const usage = tbt('eval', sub).stderr;
    const flags = [...usage.matchAll(/--[a-z][a-z-]*/g)].map((m) => m[0]);
    assert.ok(flags.length > 0, `tbt eval ${sub} printed no usage: ${usage}`);
    const section = new RegExp(`^  ${sub} (.*)$`, 'm').exec(help)?.[1] ?? '';
    for (const flag of new Set(flags)) assert.ok(section.includes(flag), `eval --help: ${sub} lacks ${flag}`);
  }
  for (const sub of ['aggregate', 'compare']) assert.match(help, new RegExp(`^  ${sub} `, 'm'));
});

import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import type { CommandDefinition } from '../../cli/command-definition.ts';
import { tbtCommands } from '../../cli/command-definitions.ts';
import { helpText, isGroup, subcommandsOf, usageLine } from '../../cli/command-help.ts';
import { parseCommandLine } from '../../cli/command-line.ts';
import { UsageError } from '../../cli/command-support.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The CLI's help comes from cli/command-definitions.ts: every command's and subcommand's --help is run as a real
 * `tbt` process and compared with its definition, and a bad flag is refused with the definition's usage line.
 * No server is reachable and the state folder is empty, so a command that ran anyway could not touch the stack.
 */

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

const env = {
  ...process.env,
  DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
  TBT_TEMPORAL_ADDRESS: '127.0.0.1:1',
  TBT_STATE_DIR: testTempDir('tbt-help-state-'),
};

function tbt(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'cli/tbt.ts', ...args],
      { cwd: repoRoot, env, encoding: 'utf8', timeout: 120_000 },
      (err, stdout, stderr) =>
        resolve({ status: err ? ((err.code as number | undefined) ?? null) : 0, stdout, stderr }),
    );
  });
}

/** Runs each command line, two at a time (the machine is shared). */
async function tbtAll(lines: string[][]): Promise<Run[]> {
  const results: Run[] = new Array(lines.length);
  let next = 0;
  const worker = async () => {
    while (next < lines.length) {
      const i = next++;
      results[i] = await tbt(lines[i]!);
    }
  };
  await Promise.all([worker(), worker()]);
  return results;
}

const words = (c: CommandDefinition) => c.path.split(' ');
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const leaves = tbtCommands.filter((c) => !isGroup(c));

test('every command and subcommand answers --help with its definition: usage line, arguments, every flag', async () => {
  const runs = await tbtAll(tbtCommands.map((c) => [...words(c), '--help']));
  tbtCommands.forEach((command, i) => {
    const { status, stdout, stderr } = runs[i]!;
    const label = `tbt ${command.path} --help`;
    assert.equal(status, 0, `${label}: exit ${status}\n${stderr}`);
    assert.equal(stdout.trimEnd(), helpText(command), label);
    assert.ok(stdout.startsWith(`${usageLine(command)}\n`), `${label}: starts with its usage line`);
    for (const flag of Object.keys(command.flags))
      assert.match(stdout, new RegExp(`--${flag}\\b`), `${label}: --${flag}`);
    for (const p of command.positionals ?? []) assert.ok(stdout.includes(p.name), `${label}: ${p.name}`);
    // A group's help names each subcommand with all of that subcommand's flags.
    for (const sub of subcommandsOf(command)) {
      assert.match(stdout, new RegExp(`^  ${escape(words(sub).at(-1)!)}( |$)`, 'm'), `${label}: ${sub.path}`);
      for (const flag of Object.keys(sub.flags))
        assert.ok(stdout.includes(`--${flag}`), `${label}: ${sub.path} --${flag}`);
    }
  });
});

test('tbt --help (and bare tbt) lists every command and subcommand', async () => {
  const [help, bare, short] = await tbtAll([['--help'], [], ['-h']]);
  assert.equal(help!.status, 0, help!.stderr);
  assert.equal(bare!.status, 2, 'bare tbt prints the help as a usage error');
  assert.equal(bare!.stdout, help!.stdout);
  assert.equal(short!.stdout, help!.stdout);
  for (const command of tbtCommands)
    assert.match(help!.stdout, new RegExp(`^  ${escape(command.path)}  `, 'm'), `tbt --help lacks ${command.path}`);
  assert.match(help!.stdout, /--unsandboxed/);
  // The real entry point (bin/tbt) prints the same.
  const real = spawnSync(path.join(repoRoot, 'bin', 'tbt'), ['--help'], { cwd: repoRoot, env, encoding: 'utf8' });
  assert.equal(real.stdout, help!.stdout);
});

test('--help anywhere on a command line prints that command help and runs nothing', async () => {
  const lines = [
    ['tasks', 'validate', 'tasks/tiny', '-h', '--concurrency', '3'],
    ['down', '--help'],
    ['workers', 'up', '-h'],
    ['train', '--config', 'config/local.yaml', '--help', '--wait'],
    ['eval', 'no-such-subcommand', '--help'],
    ['campaign', 'stop', 'some-campaign', '-h'],
    ['campaign', 'terminate', 'some-campaign', '--reason', 'wrong model', '--help'],
  ];
  const expected = ['tasks validate', 'down', 'workers up', 'train', 'eval', 'campaign stop', 'campaign terminate'];
  const runs = await tbtAll(lines);
  runs.forEach((r, i) => {
    assert.equal(r.status, 0, `${lines[i]!.join(' ')}: ${r.stderr}`);
    assert.equal(r.stdout.trimEnd(), helpText(tbtCommands.find((c) => c.path === expected[i])!), lines[i]!.join(' '));
  });
});

test('an unknown flag or subcommand prints the usage line from the definition and exits 2, everywhere', async () => {
  const lines = tbtCommands.map((c) => [...words(c), isGroup(c) ? 'no-such-subcommand' : '--no-such-flag']);
  const runs = await tbtAll(lines);
  tbtCommands.forEach((command, i) => {
    const { status, stdout, stderr } = runs[i]!;
    const label = lines[i]!.join(' ');
    assert.equal(status, 2, `${label}: exit ${status}\n${stderr}`);
    assert.equal(stdout, '', `${label}: nothing ran`);
    assert.ok(stderr.startsWith(`${usageLine(command)}\n`), `${label}: ${stderr}`);
    assert.match(
      stderr,
      isGroup(command) ? /unknown subcommand 'no-such-subcommand'/ : /Unknown option '--no-such-flag'/,
    );
  });
});

test('the parser accepts exactly the flags of each definition and requires the required ones', () => {
  for (const command of leaves) {
    const positionals = (command.positionals ?? []).map((p) => p.name);
    const flags = Object.entries(command.flags).flatMap(([name, f]) =>
      f.type === 'string' ? [`--${name}`, '1'] : [`--${name}`],
    );
    const parsed = parseCommandLine(command, [...positionals, ...flags]);
    assert.deepEqual(parsed.positionals, positionals, command.path);
    for (const name of Object.keys(command.flags))
      assert.notEqual((parsed.values as Record<string, unknown>)[name], undefined, command.path);
    for (const [name, flag] of Object.entries(command.flags).filter(([, f]) => f.required)) {
      const without = flags.filter((_, i) => flags[i] !== `--${name}` && flags[i - 1] !== `--${name}`);
      assert.throws(
        () => parseCommandLine(command, [...positionals, ...without]),
        (err) => err instanceof UsageError && err.message.startsWith(`--${name} ${flag.value} is required`),
        `${command.path} without --${name}`,
      );
    }
    assert.throws(() => parseCommandLine(command, ['--no-such-flag']), UsageError, command.path);
  }
});

// README.md is written by hand: its commands table must name every top-level command of the definitions.
test('the README commands table names every top-level command', () => {
  const readme = fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const section = /^## Commands\n([\s\S]*?)(?=^## )/m.exec(readme)?.[1] ?? '';
  const table = section
    .split('\n')
    .filter((l) => l.startsWith('|'))
    .join('\n');
  const missing = tbtCommands
    .filter((c) => !c.path.includes(' '))
    .filter((c) => !new RegExp(`tbt ${escape(c.path)}\\b`).test(table))
    .map((c) => c.path);
  assert.deepEqual(missing, [], 'commands missing from the README commands table');
});

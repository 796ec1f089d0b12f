import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import pg from 'pg';
import { runClassified, tbt, tbtFailure } from '../../campaign-records/tbt-command.ts';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { exitClassOf, exitClassOfCode, exitCodes } from '../../core/exit-codes.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * Issue 40: a `tbt` subprocess says its failure class in its exit code (core/exit-codes.ts), and the bookkeeping
 * activities that run it (campaign-records/tbt-command.ts) throw by that class. Exit 1 no longer stands for every
 * failure: a full disk, a Postgres restart or a bug inside `tbt report` is not bad input.
 */

// Nothing is reachable: a command that needs Postgres meets a refused connection (infrastructure).
const unreachable = {
  DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
  TBT_TEMPORAL_ADDRESS: '127.0.0.1:1',
  TBT_STATE_DIR: testTempDir('tbt-exit-state-'),
};
Object.assign(process.env, unreachable);

function systemError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

function databaseError(code: string, message: string): pg.DatabaseError {
  const err = new pg.DatabaseError(message, message.length, 'error');
  err.code = code;
  err.severity = 'FATAL';
  return err;
}

const byError: [string, unknown, number][] = [
  ['a full disk (ENOSPC)', systemError('ENOSPC', 'ENOSPC: no space left on device, write'), 75],
  ['a refused connection (ECONNREFUSED)', systemError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432'), 75],
  ['Postgres in recovery (57P03)', databaseError('57P03', 'the database system is in recovery mode'), 75],
  ['a name that does not resolve (ENOTFOUND)', systemError('ENOTFOUND', 'getaddrinfo ENOTFOUND db'), 75],
  ['ENOSPC under a wrapper', new Error('writing report.md', { cause: systemError('ENOSPC', 'no space') }), 75],
  ['an InfrastructureError', new InfrastructureError('policy server unreachable'), 75],
  ['a BadInputError', new BadInputError('suite.yaml:3: field uid: expected a string'), 1],
  ['a TypeError (a bug)', new TypeError("Cannot read properties of undefined (reading 'x')"), 70],
  ['a syntax error in a statement (42601, a bug)', databaseError('42601', 'syntax error at or near "SELEC"'), 70],
  ['a thrown string', 'boom', 70],
];

for (const [what, err, code] of byError)
  test(`exit code: ${what} exits ${code}`, () => {
    assert.equal(exitCodes[exitClassOf(err)], code);
  });

test('exit code: a workflow a command waited on exits by its failure class', () => {
  const waited = (failureClass: string) =>
    Object.assign(new Error('campaign c failed'), { explanation: { failureClass } });
  assert.equal(exitClassOf(waited('bad input')), 'badInput');
  assert.equal(exitClassOf(waited('infrastructure')), 'infrastructure');
  assert.equal(exitClassOf(waited('no worker polling')), 'infrastructure');
  assert.equal(exitClassOf(waited('unclassified')), 'unclassified');
});

test('exit codes: one per class, 1 still bad input and 2 bad flags', () => {
  assert.deepEqual(exitCodes, { ok: 0, badInput: 1, usage: 2, unclassified: 70, infrastructure: 75 });
  assert.equal(new Set(Object.values(exitCodes)).size, Object.keys(exitCodes).length);
  for (const [name, code] of Object.entries(exitCodes)) assert.equal(exitClassOfCode(code), name);
  assert.equal(exitClassOfCode(3), undefined);
});

test('exit code back to an error: bad flags and bad input never retried, infrastructure retried, a bug plain', () => {
  const end = (code: number | null, extra: Partial<Parameters<typeof tbtFailure>[1]> = {}) =>
    tbtFailure('tbt report', { code, signal: null, killed: false, stderr: 'tbt: what went wrong\n', ...extra });
  for (const code of [1, 2]) assert.ok(end(code) instanceof BadInputError, `exit ${code}`);
  assert.ok(end(75) instanceof InfrastructureError);
  for (const code of [70, 3, 64]) {
    const err = end(code);
    assert.ok(!(err instanceof BadInputError) && !(err instanceof InfrastructureError), `exit ${code}: ${err.name}`);
  }
  assert.ok(end(null, { signal: 'SIGKILL' }) instanceof InfrastructureError);
  // Through tsx a signal arrives as 128 + its number: the OOM killer's SIGKILL, V8's abort on a full heap.
  for (const code of [137, 134]) assert.ok(end(code) instanceof InfrastructureError, `exit ${code}`);
  assert.match(end(null, { signal: 'SIGTERM', killed: true }).message, /time limit/);
  assert.match(end(143, { killed: true }).message, /time limit/);
  for (const code of [1, 2, 70, 75, null]) assert.match(end(code, { signal: 'SIGKILL' }).message, /what went wrong/);
  // The tail: what tbt printed last (its class line) survives a long stderr.
  assert.match(end(75, { stderr: `${'x'.repeat(5000)}\ntbt: class=infrastructure exit=75` }).message, /exit=75$/);
});

/** `node -e SCRIPT` through the same runner `tbt()` uses. */
function node(script: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<string> {
  return runClassified(process.execPath, ['-e', script], 'tbt test', options);
}

test('a real subprocess: each exit code is thrown as its class, with the stderr tail', async () => {
  const exit = (code: number) => `process.stderr.write('said ${code}\\n'); process.exit(${code})`;
  await assert.rejects(node(exit(1)), (e: Error) => e instanceof BadInputError && /said 1/.test(e.message));
  await assert.rejects(node(exit(2)), (e: Error) => e instanceof BadInputError && /said 2/.test(e.message));
  await assert.rejects(node(exit(75)), (e: Error) => e instanceof InfrastructureError && /said 75/.test(e.message));
  await assert.rejects(
    node(exit(70)),
    (e: Error) => e.constructor === Error && /exit 70, unclassified\): said 70/.test(e.message),
  );
  await assert.rejects(node('process.kill(process.pid, "SIGKILL")'), InfrastructureError);
  // The same through tsx, as tbt() runs: tsx exits 137 for its child's SIGKILL.
  const tsx = path.join(repoRoot, 'node_modules', '.bin', 'tsx');
  await assert.rejects(
    runClassified(tsx, ['-e', 'process.kill(process.pid, "SIGKILL")'], 'tbt test', {}),
    (e: Error) => e instanceof InfrastructureError && /exit 137/.test(e.message),
  );
  await assert.rejects(
    runClassified(tsx, ['-e', 'setTimeout(() => {}, 60_000)'], 'tbt test', { timeoutMs: 1500 }),
    (e: Error) => e instanceof InfrastructureError && /time limit/.test(e.message),
  );
  await assert.rejects(node('setTimeout(() => {}, 60_000)', { timeoutMs: 300 }), /time limit/);
  assert.equal(await node('process.stdout.write("out")'), 'out');
  // A cancelled activity: the abort is thrown as it is, not turned into a class.
  const abort = new AbortController();
  const cancelled = node('setTimeout(() => {}, 60_000)', { signal: abort.signal });
  abort.abort();
  await assert.rejects(cancelled, (e: Error) => e.name === 'AbortError');
});

test('real tbt: a bad flag and bad input are BadInputError, a refused Postgres is InfrastructureError', async () => {
  await assert.rejects(
    tbt(['report', '--bogus'], undefined),
    (e: Error) => e instanceof BadInputError && /exit 2.*Unknown option '--bogus'/s.test(e.message),
  );
  const dir = testTempDir('tbt-exit-');
  const tasks = path.join(dir, 'tasks.yaml');
  fs.writeFileSync(tasks, '- t1\n');
  const missing = path.join(dir, 'missing.jsonl');
  await assert.rejects(
    tbt(
      ['eval', 'aggregate', '--results', missing, '--repeats', '1', '--tasks', tasks, '--out', 'a.json'],
      undefined,
      dir,
    ),
    (e: Error) => e instanceof BadInputError && /exit 1/.test(e.message) && e.message.includes(missing),
  );
  await assert.rejects(
    tbt(['episodes', 'show', 'c/no-episode'], undefined),
    (e: Error) => e instanceof InfrastructureError && /exit 75.*ECONNREFUSED/s.test(e.message),
  );
});

test('real tbt: the exit code and the last stderr line name the class', () => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'cli/tbt.ts', 'episodes', 'show', 'c/no-episode'], {
    cwd: repoRoot,
    env: { ...process.env, ...unreachable },
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(r.status, 75, r.stderr);
  assert.equal(r.stderr.trim().split('\n').at(-1), 'tbt: class=infrastructure exit=75');
});

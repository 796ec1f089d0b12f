import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../config/environment.ts';
import { testTempDir } from './helpers/temp-dir.ts';

const run = promisify(execFile);
const tbt = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  run(path.join(repoRoot, 'node_modules', '.bin', 'tsx'), [path.join(repoRoot, 'cli', 'tbt.ts'), ...args], {
    env: { ...process.env, ...env },
    timeout: 120_000,
  });

async function occupiedPort(): Promise<{ port: number; close: () => void }> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as net.AddressInfo).port, close: () => server.close() };
}

test('tbt status reports both running servers', async () => {
  const { stdout } = await tbt(['status']);
  assert.match(stdout, /postgres\s+running/);
  assert.match(stdout, /temporal\s+running .*UI http:\/\/localhost:\d+/);
});

test('tbt up is idempotent: a second call reports the servers already running', async () => {
  const { stdout } = await tbt(['up']);
  assert.match(stdout, /postgres: already running/);
  assert.match(stdout, /temporal: already running/);
});

test('a taken port gives a clear error naming the port and the variable to set', async () => {
  const blocker = await occupiedPort();
  const state = testTempDir('tbt-state-');
  try {
    await assert.rejects(
      tbt(['up'], { TBT_STATE_DIR: state, TBT_PG_PORT: String(blocker.port), TBT_TEMPORAL_PORT: String(blocker.port) }),
      (err: { stderr: string }) => {
        assert.match(
          err.stderr,
          new RegExp(
            `port ${blocker.port} is already in use by another process; stop it or set TBT_(PG|TEMPORAL)_PORT`,
          ),
        );
        return true;
      },
    );
  } finally {
    blocker.close();
  }
});

test('missing Postgres binaries give a clear error', async () => {
  const state = testTempDir('tbt-state-');
  const free = await occupiedPort();
  free.close();
  await assert.rejects(
    tbt(['up'], {
      TBT_STATE_DIR: state,
      TBT_PG_PORT: String(free.port),
      TBT_PG_BIN: '/nonexistent',
      PATH: '/usr/bin:/bin',
      TBT_PG_SEARCH_SYSTEM: '0',
    }),
    (err: { stderr: string }) => {
      assert.match(err.stderr, /PostgreSQL server binaries \(initdb, pg_ctl\) not found/);
      return true;
    },
  );
});

test('a bad environment value names the variable', async () => {
  await assert.rejects(tbt(['status'], { TBT_PG_PORT: 'seventy' }), (err: { stderr: string }) => {
    assert.match(err.stderr, /environment variable TBT_PG_PORT/);
    return true;
  });
});

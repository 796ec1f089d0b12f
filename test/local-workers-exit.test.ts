import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot, type Environment } from '../config/environment.ts';
import { exitedWorkers, stopWorkers } from '../infra/local-workers.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * `tbt campaign follow` warns when a local worker died on its own (its queue is then unpolled and the campaign
 * waits): a pid file without its process. `tbt workers down` removes the pid files, so a stopped worker is not
 * reported as exited. Real processes stand in for the workers.
 */
test('a worker that exited on its own is reported; one stopped by workers down is not', async () => {
  const stateDir = testTempDir('tbt-workers-');
  const env = { TBT_STATE_DIR: stateDir } as Environment;
  const dir = path.join(stateDir, 'workers');
  fs.mkdirSync(dir, { recursive: true });
  const dead = spawn('true');
  await once(dead, 'exit');
  // A process whose arguments name the worker script, as a real worker's do (the pid check needs that marker).
  const alive = spawn(
    process.execPath,
    ['-e', 'setInterval(() => {}, 1000)', path.join(repoRoot, 'workers', 'rollout-worker.ts')],
    {
      stdio: 'ignore',
    },
  );
  fs.writeFileSync(path.join(dir, 'bookkeeping.pid'), String(dead.pid));
  fs.writeFileSync(path.join(dir, 'rollout.pid'), String(alive.pid));
  try {
    assert.deepEqual(exitedWorkers(env), [{ kind: 'bookkeeping', log: path.join(dir, 'bookkeeping.log') }]);
    assert.deepEqual(await stopWorkers(env), ['rollout']);
    assert.deepEqual(exitedWorkers(env), [], 'workers down leaves no pid file behind');
    assert.equal(fs.existsSync(path.join(dir, 'rollout.pid')), false);
  } finally {
    alive.kill('SIGKILL');
  }
});

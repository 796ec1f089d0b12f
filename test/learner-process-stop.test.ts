import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout } from 'node:timers/promises';
import { stopDetachedGpuProcesses } from '../learner-control/campaign-gpu-processes.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * `tbt workers down` stops the detached GPU processes through their pid files. Stand-ins here are real processes
 * (`sleep`, each leading its own process group, as torchrun and the policy server do); what is tested is the
 * clean-up by pid file and that a learner killed this way leaves no endpoint file behind.
 */

function groupLeader(): ChildProcess {
  return spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
}

test('workers down stops every learner and policy server and removes the endpoint file', async () => {
  const stateDir = testTempDir('tbt-stop-');
  const files = learnerFiles(stateDir, 'campaign-a');
  fs.mkdirSync(files.checkpoints, { recursive: true });
  const learner = groupLeader();
  const server = groupLeader();
  const exited = [once(learner, 'exit'), once(server, 'exit')];
  fs.writeFileSync(files.pid, String(learner.pid));
  fs.writeFileSync(files.policyServerPid, String(server.pid));
  // the endpoint of a learner whose control server is gone (nothing listens on port 9 of 127.0.0.1)
  const endpoint = path.join(files.checkpoints, 'control.json');
  fs.writeFileSync(endpoint, JSON.stringify({ host: '127.0.0.1', port: 9 }));
  fs.writeFileSync(path.join(files.checkpoints, 'control.token'), 'x');
  fs.mkdirSync(learnerFiles(stateDir, 'campaign-b').dir); // a campaign with nothing running

  assert.equal(await stopDetachedGpuProcesses(stateDir), 2);
  const gone = await Promise.race([Promise.all(exited).then(() => true), setTimeout(10_000, false)]);
  assert.ok(gone, 'both process groups were stopped');
  assert.equal(fs.existsSync(endpoint), false);
  assert.equal(await stopDetachedGpuProcesses(stateDir), 0, 'nothing left to stop');
});

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot, type Environment } from '../../config/environment.ts';
import { isAlive } from '../../infra/daemon.ts';
import { policyServerProcesses } from '../../infra/embedded-policy-server.ts';
import { stopVerifiedProcess, writePidFile } from '../../infra/pid-identity.ts';
import { stopWorkers } from '../../infra/local-workers.ts';
import { stopTemporal } from '../../infra/temporal-dev-server.ts';
import { stopTypesense } from '../../infra/typesense-standin.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * `tbt down` / `tbt workers down` signal the pid in each pid file. A stale or planted file must not make them
 * kill an unrelated process. Every process here is one this test starts; the real servers are not touched
 * (the state folder is a fresh temp folder).
 */

function startTicks(pid: number): string {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
}

function stateDir(): { env: Environment; file: (service: string, name: string) => string } {
  const dir = testTempDir('tbt-pid-identity-');
  return {
    env: { TBT_STATE_DIR: dir } as Environment,
    file: (service, name) => {
      fs.mkdirSync(path.join(dir, service), { recursive: true });
      return path.join(dir, service, name);
    },
  };
}

function unrelated(): ChildProcess {
  return spawn('sleep', ['300'], { stdio: 'ignore' });
}

test('second review, finding 7 (pid files): a pid file naming an unrelated process kills nothing', async () => {
  const { env, file } = stateDir();
  const victims = [unrelated(), unrelated(), unrelated(), unrelated()];
  try {
    const [worker, temporal, search, planted] = victims.map((v) => v.pid!);
    // Stale (a bare pid, as older code wrote them) and planted (with the victim's own start time).
    fs.writeFileSync(file('workers', 'rollout.pid'), String(worker));
    fs.writeFileSync(file('workers', 'gpu.pid'), `${planted} ${startTicks(planted!)}\n`);
    fs.writeFileSync(file('temporal', 'server.pid'), String(temporal));
    fs.writeFileSync(file('typesense', 'standin.pid'), `${search} ${startTicks(search!)}`);
    assert.deepEqual(await stopWorkers(env), [], 'no worker of ours was running');
    assert.equal(await stopTemporal(env), false);
    assert.equal(await stopTypesense(env), false);
    for (const v of victims) assert.ok(isAlive(v.pid!), `unrelated process ${v.pid} was signalled`);
  } finally {
    for (const v of victims) v.kill('SIGKILL');
  }
});

test('second review, finding 7 (pid files): our own worker is stopped; the same pid started later is not', async () => {
  const { env, file } = stateDir();
  // Looks like the rollout worker to the identity check: its script path is one of its arguments.
  const script = path.join(repoRoot, 'workers', 'rollout-worker.ts');
  const lookalike = () => spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', script], { stdio: 'ignore' });
  const ours = lookalike();
  const reused = lookalike();
  try {
    fs.writeFileSync(file('workers', 'rollout.pid'), `${ours.pid} ${startTicks(ours.pid!)}\n`);
    // A start time that is not the process's: the pid was reused by a process started after the file.
    fs.writeFileSync(file('workers', 'orchestrator.pid'), `${reused.pid} ${Number(startTicks(reused.pid!)) - 1}\n`);
    const exited = new Promise((resolve) => ours.once('exit', resolve));
    assert.deepEqual(await stopWorkers(env), ['rollout']);
    await exited;
    assert.ok(isAlive(reused.pid!), 'a process started after its pid file was written was signalled');
  } finally {
    ours.kill('SIGKILL');
    reused.kill('SIGKILL');
  }
});

test('second review, finding 7 (pid files): a policy server group is stopped only when the pid is one', async () => {
  const { file } = stateDir();
  const server = spawn('/usr/bin/python3', ['-c', 'import time; time.sleep(300)', 'tbt_gpu.policy_server'], {
    stdio: 'ignore',
    detached: true,
  });
  const victim = spawn('sleep', ['300'], { stdio: 'ignore', detached: true });
  try {
    writePidFile(file('learner', 'policy-server.pid'), server.pid!);
    writePidFile(file('learner', 'stale.pid'), victim.pid!);
    const expected = policyServerProcesses;
    assert.equal(await stopVerifiedProcess(file('learner', 'stale.pid'), expected, { group: true }), false);
    assert.ok(isAlive(victim.pid!));
    const exited = new Promise((resolve) => server.once('exit', resolve));
    assert.equal(await stopVerifiedProcess(file('learner', 'policy-server.pid'), expected, { group: true }), true);
    await exited;
  } finally {
    server.kill('SIGKILL');
    victim.kill('SIGKILL');
  }
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { testTempDir } from './helpers/temp-dir.ts';
import { runAsUnprivilegedUser, unreadableBy } from './helpers/unprivileged-user.ts';

/**
 * The worker image's install steps (docker/worker-image-setup.sh, which docker/worker.Dockerfile runs) and the
 * rollout worker's container settings, as far as a machine without a Docker engine allows: the Debian packages
 * resolve on this Debian release (the image's base is the same), the helper environment builds and the image's
 * own check passes; then Docker's default seccomp profile and ours are loaded into the kernel for a process of an
 * ordinary user with no capabilities (the container's `cap_drop: [ALL]`, `no-new-privileges`), and the dataset
 * sandbox is refused under the first and runs code under the second.
 */

const script = path.join(repoRoot, 'docker', 'worker-image-setup.sh');
const seccompFixtures = path.join(repoRoot, 'test', 'fixtures', 'docker-seccomp');
const run = (args: string[], env: Record<string, string> = {}) =>
  spawnSync('bash', [script, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 300_000 });

test('second review, finding 8: image install steps run: packages resolve, helper venv builds, check passes', () => {
  const simulated = run(['system-packages', '--simulate']);
  assert.equal(simulated.status, 0, simulated.stderr);
  for (const pkg of ['bubblewrap', 'python3-venv', 'python3', 'util-linux'])
    assert.match(simulated.stdout, new RegExp(`(^Inst ${pkg} |^${pkg} is already the newest)`, 'm'), pkg);

  const prefix = testTempDir('tbt-worker-image-');
  const venv = path.join(prefix, 'opt', 'thinkingbox-venv');
  const marker = path.join(prefix, 'app', '.tools', 'thinkingbox-venv');
  // The check fails, naming what is missing, before the helper environment exists.
  const before = run(['check', marker]);
  assert.notEqual(before.status, 0);
  assert.match(before.stderr, /no helper environment recorded/);

  const built = run(['helper-venv', venv, marker]);
  assert.equal(built.status, 0, built.stderr);
  assert.equal(fs.readFileSync(marker, 'utf8').trim(), venv);
  const cfg = fs.readFileSync(path.join(venv, 'pyvenv.cfg'), 'utf8');
  assert.match(cfg, /^home = \/usr\/bin$/m, 'the venv is made from the system Python, not one a PATH finds');

  const checked = run(['check', marker]);
  assert.equal(checked.status, 0, checked.stderr);
  assert.match(checked.stdout, /^\[worker-image\] ok: bubblewrap [\d.]+, Python 3\.1[1-9]\.\d+, helper environment /m);

  fs.writeFileSync(marker, `${path.join(prefix, 'nowhere')}\n`);
  const broken = run(['check', marker]);
  assert.notEqual(broken.status, 0);
  assert.match(broken.stderr, /nowhere, which has no bin\/python/);
});

/** Runs the sandbox probe as uid 65534 with no capabilities under `profile`; its JSON line. */
async function probeUnder(profile: string): Promise<Record<string, unknown>> {
  const command = [
    '/usr/bin/python3',
    path.join(repoRoot, 'test', 'helpers', 'apply-seccomp-profile.py'),
    profile,
    '', // the container's capabilities: none (cap_drop: [ALL])
    '--',
    process.execPath,
    '--import',
    'tsx',
    path.join(seccompFixtures, 'sandbox-probe.ts'),
  ];
  const unreadable = unreadableBy([repoRoot, process.execPath]);
  const result = await runAsUnprivilegedUser(command, {
    cwd: repoRoot,
    expose: unreadable.map((u) => u.path),
    timeoutMs: 120_000,
  });
  const line = result.output.split('\n').find((l) => l.startsWith('{'));
  assert.ok(line, `no probe output (exit ${result.code}):\n${result.output}`);
  return JSON.parse(line) as Record<string, unknown>;
}

test(
  "second review, finding 8: under compose's seccomp profile an ordinary user with no capabilities runs dataset " +
    "code in bubblewrap; under Docker's default it is refused",
  { skip: process.getuid?.() !== 0 ? 'needs root (it switches to an ordinary user)' : false },
  async () => {
    const refused = await probeUnder(path.join(seccompFixtures, 'moby-default.json'));
    assert.match(String(refused.refused), /dataset code is refused: no working sandbox/, JSON.stringify(refused));

    const ours = await probeUnder(path.join(repoRoot, 'docker', 'seccomp-bubblewrap.json'));
    assert.equal(ours.mode, 'bubblewrap', JSON.stringify(ours));
    assert.equal(ours.status, 0, JSON.stringify(ours));
    // Its own pid namespace (the code is one of the first processes there) and uts namespace (bwrap --hostname).
    const [pid, hostname] = String(ours.stdout).split(' ');
    assert.ok(Number(pid) <= 4, `pid inside the sandbox: ${pid}`);
    assert.equal(hostname, 'sandbox');
  },
);

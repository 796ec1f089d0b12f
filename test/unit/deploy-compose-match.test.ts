import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import { allowedByProfile, interpolate, overrideProblems } from '../../scripts/deploy-compose-match.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** The parts of test:deploy's compose check (scripts/deploy-compose-match.ts) that need no container engine. */

test('compose interpolation: defaults, required variables, empty values and $$', () => {
  const vars = { SET: 'x', EMPTY: '' };
  assert.equal(interpolate('${SET:-d} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${UNSET-d} $${SET}', vars), 'x d d  d ${SET}');
  assert.equal(interpolate('a${UNSET}b', vars), 'ab');
  assert.throws(() => interpolate('${UNSET:?set UNSET (docker/.env)}', vars), /UNSET: set UNSET/);
  assert.equal(interpolate('${EMPTY?must be set}', vars), '');
});

test("the bubblewrap profile's filter: the namespace calls for a container without capabilities, not others", () => {
  const profile = path.join(repoRoot, 'docker', 'seccomp-bubblewrap.json');
  const none = allowedByProfile(profile, new Set());
  for (const name of ['unshare', 'mount', 'pivot_root', 'read', 'clone']) assert.ok(none.has(name), name);
  // Only with CAP_SYS_BOOT, and only on other architectures.
  assert.ok(!none.has('reboot'));
  assert.ok(allowedByProfile(profile, new Set(['CAP_SYS_BOOT'])).has('reboot'));
  assert.ok(!none.has('s390_runtime_instr'));
});

test("the test's compose override may hold only the GPU worker's ulimits and GPU reservation reset", () => {
  const dir = testTempDir('tbt-compose-match-');
  const file = path.join(dir, 'override.yaml');
  fs.writeFileSync(file, 'services:\n  gpu-worker:\n    ulimits:\n      memlock: 1\n    deploy: !reset {}\n');
  assert.deepEqual(overrideProblems(file), []);
  fs.appendFileSync(file, '    privileged: true\n  rollout-worker:\n    volumes: [/:/host]\n');
  assert.deepEqual(overrideProblems(file), ['override: gpu-worker.privileged', 'override: rollout-worker.volumes']);
  fs.rmSync(dir, { recursive: true, force: true });
});

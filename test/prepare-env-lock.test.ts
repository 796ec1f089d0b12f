import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../config/environment.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Issue 24: two builds of one dataset environment at once (two `tbt tasks prepare-env`, two workers) both
 * removed and rebuilt the same venv. With the build lock the second waits for the first and reuses its venv.
 */

const work = testTempDir('tbt-prepare-env-lock-');
fs.chmodSync(work, 0o755); // the install runs as an unprivileged uid of its own: what it reads must be readable
const pkg = path.join(work, 'servers', 'lock_probe');

function makePackage(): void {
  fs.mkdirSync(path.join(pkg, 'lock_probe'), { recursive: true, mode: 0o755 });
  fs.chmodSync(path.join(work, 'servers'), 0o755);
  fs.writeFileSync(
    path.join(pkg, 'pyproject.toml'),
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n' +
      '[project]\nname = "lock_probe"\nversion = "0.1.0"\ndependencies = []\n',
  );
  fs.writeFileSync(path.join(pkg, 'lock_probe', '__init__.py'), 'VALUE = 1\n');
}

/** One prepare call in a process of its own; its log lines and the venv it reports. */
function prepareInChild(): Promise<{ code: number | null; lines: string[] }> {
  const module = pathToFileURL(path.join(repoRoot, 'datasets', 'thinkingbox', 'dataset-environment.ts')).href;
  const script =
    `const { prepareDatasetEnvironment } = await import(${JSON.stringify(module)});\n` +
    `const env = prepareDatasetEnvironment(${JSON.stringify([pkg])}, (l) => console.log(l));\n` +
    'console.log(`ready ${env.venv}`);\n';
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    env: { ...process.env, TBT_DATASET_ENV_DIR: path.join(work, 'envs') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, lines: out.split('\n') })));
}

test('issue 24: two concurrent builds of one environment: one builds, the other waits and reuses it', async () => {
  makePackage();
  const runs = await Promise.all([prepareInChild(), prepareInChild()]);
  for (const run of runs) assert.equal(run.code, 0, run.lines.join('\n'));
  const all = runs.flatMap((r) => r.lines);
  const builds = all.filter((l) => l.startsWith('creating the dataset Python environment'));
  assert.equal(builds.length, 1, all.join('\n'));
  const venvs = runs.map((r) => r.lines.find((l) => l.startsWith('ready '))!.slice('ready '.length));
  assert.equal(venvs[0], venvs[1]);
  assert.ok(fs.existsSync(path.join(venvs[0]!, '.tbt-ready')));
  assert.ok(
    all.some((l) => l.startsWith('waiting for another build')),
    'the second build waited for the first',
  );
});

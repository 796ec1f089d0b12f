import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { environmentSchema, readEnvironment, repoRoot } from '../../config/environment.ts';

function sourceFiles(dir: string, ext: RegExp): string[] {
  return fs.readdirSync(path.join(repoRoot, dir), { withFileTypes: true, recursive: true }).flatMap((e) => {
    const file = path.relative(repoRoot, path.join(e.parentPath, e.name));
    return e.isFile() && ext.test(e.name) && !/(^|\/)(node_modules|tests?)\//.test(file) ? [file] : [];
  });
}

test('finding 9: TBT_SANDBOX_WARM=two and other malformed variables stop with a message naming the variable', () => {
  const bad: Record<string, string> = {
    TBT_SANDBOX_WARM: 'two',
    TBT_ROLLOUT_CONCURRENCY: 'abc',
    TBT_GPU_HOST: 'gpu 0/evil',
  };
  for (const [name, value] of Object.entries(bad)) {
    assert.throws(() => readEnvironment({ [name]: value }), new RegExp(`environment variable ${name}:`), name);
  }
  assert.throws(() => readEnvironment({ TBT_SANDBOX_WARM: '1000' }), /TBT_SANDBOX_WARM/);
  assert.throws(() => readEnvironment({ TBT_ROLLOUT_CONCURRENCY: '' }), /TBT_ROLLOUT_CONCURRENCY/);
  const env = readEnvironment({ TBT_SANDBOX_WARM: '0', TBT_ROLLOUT_CONCURRENCY: '8', TBT_GPU_HOST: 'gpu-0' });
  assert.deepEqual([env.TBT_SANDBOX_WARM, env.TBT_ROLLOUT_CONCURRENCY, env.TBT_GPU_HOST], [0, 8, 'gpu-0']);

  // The rollout worker refuses to start (it used to create clones without end).
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'workers/rollout-worker.ts'], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: { ...process.env, TBT_SANDBOX_WARM: 'two', DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' },
    timeout: 60_000,
  });
  assert.equal(r.status, 1);
  assert.match(r.stdout + r.stderr, /environment variable TBT_SANDBOX_WARM: /);
});

test('finding 9: every variable the code reads is in the zod schema and in the README list, read only there', () => {
  const read = new Map<string, string>();
  const rawReads: string[] = [];
  for (const file of [...sourceFiles('.', /\.ts$/), 'bin/tbt']) {
    if (file.startsWith('test/') || file === 'config/environment.ts') continue;
    const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
    // An assignment (`process.env.X = ...`, passing a switch to child processes) is not a read.
    for (const m of text.matchAll(/process\.env(?:\.|\[['"])(TBT_\w+|DATABASE_URL)\b(?!['"\]]*\s*=[^=])/g)) {
      read.set(m[1]!, file);
      rawReads.push(`${file}: ${m[0]}`);
    }
  }
  for (const file of [...sourceFiles('gpu-learner', /\.py$/), ...sourceFiles('thinkingbox', /\.py$/)]) {
    const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
    for (const m of text.matchAll(/"(TBT_[A-Z_]+)"/g)) read.set(m[1]!, file);
  }
  for (const file of ['scripts/setup.sh', 'scripts/test.sh']) {
    const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
    for (const m of text.matchAll(/\$\{?(TBT_[A-Z_]+)/g)) read.set(m[1]!, file);
    // setup.sh's python_venv takes the name of its override variable and reads it by indirection.
    for (const m of text.matchAll(/^python_venv \S+ (TBT_\w+)/gm)) read.set(m[1]!, file);
  }
  assert.ok(read.has('TBT_MODEL_CACHE') && read.has('TBT_PY_VENV'), 'the scan finds Python and shell reads');
  assert.deepEqual(rawReads, [], 'raw process.env reads outside config/environment.ts');
  const readme = fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const schema = Object.keys(environmentSchema.shape);
  for (const [name, file] of read) assert.ok(schema.includes(name), `${name} (read in ${file}) is not in the schema`);
  for (const name of schema) {
    assert.ok(readme.includes(`\`${name}\``), `${name} is not in README's list`);
    assert.ok(environmentSchema.shape[name as keyof typeof environmentSchema.shape].description, `${name}: describe()`);
  }
});

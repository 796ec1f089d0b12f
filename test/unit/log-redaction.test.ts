import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { redactSecretsInText } from '../../core/secret-text.ts';
import { createServiceLogger } from '../../infra/service-logger.ts';

test('finding 14: the service logger redacts secret fields, error texts and messages', () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  const log = createServiceLogger('redaction-test', {}, sink);
  log.info({ password: 'pw-one', config: { apiKey: 'pw-two' }, a: { b: { controlUrl: 'x' } } }, 'fields');
  log.error({ err: new Error('connect postgres://tbt:pw-three@db:5432/tbt failed') }, 'error');
  log.warn('retrying postgres://tbt:pw-four@db/tbt with Authorization: Bearer pw-five');
  const out = lines.join('');
  assert.equal(lines.length, 3);
  for (const secret of ['pw-one', 'pw-two', 'pw-three', 'pw-four', 'pw-five', '"controlUrl":"x"'])
    assert.ok(!out.includes(secret), `${secret} in ${out}`);
  assert.match(out, /postgres:\/\/tbt:\[redacted\]@db:5432\/tbt failed/);
  assert.equal(redactSecretsInText('password=hunter2 token: abc'), 'password=[redacted] token: [redacted]');
});

test('finding 14: a malformed DATABASE_URL is refused without printing its password', () => {
  for (const url of [
    'postgres://tbt:pw-six@127.0.0.1:notaport/tbt',
    'postgres://tbt:pw-six@[::1/tbt',
    'mysql://tbt:pw-six@h/d',
  ]) {
    assert.throws(
      () => readEnvironment({ DATABASE_URL: url }),
      (err: Error) => err.message.startsWith('environment variable DATABASE_URL: ') && !err.message.includes('pw-six'),
    );
  }
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'workers/rollout-worker.ts'], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: 'postgres://tbt:pw-seven@127.0.0.1:notaport/tbt' },
    timeout: 60_000,
  });
  assert.equal(r.status, 1);
  assert.match(r.stdout + r.stderr, /environment variable DATABASE_URL/);
  assert.ok(!(r.stdout + r.stderr).includes('pw-seven'), r.stdout + r.stderr);
});

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

test('second review, finding 7 (log scrubber): passwords with / or #, PGPASSWORD, JSON keys, Basic auth', () => {
  const cases: [string, string][] = [
    ['connect postgres://tbt:pa/ss#w0rd@db:5432/tbt failed', 'pa/ss#w0rd'],
    ['postgres://tbt:p@ss/wd@db/tbt', 'p@ss/wd'],
    ['PGPASSWORD=hunter/2#x psql -h db', 'hunter/2#x'],
    ['env: TBT_AGENT_DB_PASSWORD=s3cret-agent', 's3cret-agent'],
    ['body {"apiKey":"sk-json-secret","model":"m"}', 'sk-json-secret'],
    ['body {"api_key": "sk-json-spaced"}', 'sk-json-spaced'],
    ["config {'password': 'quoted pass phrase'}", 'quoted pass phrase'],
    ['Authorization: Basic dXNlcjpiYXNpYy1zZWNyZXQ=', 'dXNlcjpiYXNpYy1zZWNyZXQ='],
    ['headers {"authorization":"Basic Zm9vOmJhcg=="}', 'Zm9vOmJhcg=='],
    ['GET https://user:url-secret@example.com/x', 'url-secret'],
    ['x-api-key: sk-header-secret', 'sk-header-secret'],
  ];
  for (const [text, secret] of cases) {
    const out = redactSecretsInText(text);
    assert.ok(!out.includes(secret), `${secret} survived: ${out}`);
    assert.ok(out.includes('[redacted]'), out);
  }
  // Text around the secret stays readable.
  assert.equal(
    redactSecretsInText('connect postgres://tbt:pa/ss#w0rd@db:5432/tbt failed'),
    'connect postgres://tbt:[redacted]@db:5432/tbt failed',
  );
  assert.equal(redactSecretsInText('{"apiKey":"sk-1","model":"m"}'), '{"apiKey":"[redacted]","model":"m"}');
  assert.equal(
    redactSecretsInText('max_tokens: 5, basic setup, http://host:8080/path'),
    'max_tokens: 5, basic setup, http://host:8080/path',
  );

  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  const log = createServiceLogger('redaction-test', {}, sink);
  log.info({ PGPASSWORD: 'pw-field', headers: { Authorization: 'Basic pw-header' } }, 'fields');
  log.warn({ detail: { command: 'PGPASSWORD=pw-detail psql', urls: ['postgres://u:pw/url@h/d'] } }, 'nested');
  log.error({ err: new Error('PGPASSWORD=pw-err psql failed') }, 'PGPASSWORD=pw-msg');
  const out = lines.join('');
  for (const secret of ['pw-field', 'pw-header', 'pw-err', 'pw-msg', 'pw-detail', 'pw/url'])
    assert.ok(!out.includes(secret), out);
  assert.match(out, /"command":"PGPASSWORD=\[redacted\] psql"/);
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { writeRunToken } from '../../infra/embedded-policy-server.ts';
import { controlEndpoint, learnerFiles } from '../../learner-control/learner-process.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

test('finding 15: run tokens live in 0600 files, fresh per run, and travel only inside the process', () => {
  const dir = testTempDir('tbt-token-');
  const file = path.join(dir, 'policy-server.token');
  writeRunToken(file);
  const first = fs.readFileSync(file, 'utf8');
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  assert.match(first, /^[0-9a-f]{64}$/);
  writeRunToken(file);
  assert.notEqual(fs.readFileSync(file, 'utf8'), first, 'a new run gets a new token');
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);

  // The learner's endpoint is found from its port file plus its token file; without the token, none.
  const files = learnerFiles(dir, 'campaign-1');
  fs.mkdirSync(files.checkpoints, { recursive: true });
  fs.writeFileSync(path.join(files.checkpoints, 'control.json'), JSON.stringify({ host: '127.0.0.1', port: 9 }));
  assert.equal(controlEndpoint(files), undefined);
  fs.writeFileSync(path.join(files.checkpoints, 'control.token'), 'abc\n', { mode: 0o600 });
  assert.deepEqual(controlEndpoint(files), { url: 'http://127.0.0.1:9', token: 'abc' });
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { policyServerUrlFile, policySyncToken, policyTokenFile } from '../../learner-control/policy-sync-token.ts';
import { writeRunToken } from '../../infra/embedded-policy-server.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const embeddedUrl = 'http://127.0.0.1:40001/v1';
const externalUrl = 'http://127.0.0.1:40002/v1';

function campaignDir(): string {
  const dir = testTempDir('tbt-sync-token-');
  fs.writeFileSync(policyServerUrlFile(dir), JSON.stringify({ baseUrl: embeddedUrl, model: 'm' }));
  writeRunToken(policyTokenFile(dir));
  return dir;
}

test('the embedded token goes only to the embedded server; external servers get TBT_POLICY_SYNC_TOKEN_FILE', () => {
  const dir = campaignDir();
  const embedded = fs.readFileSync(policyTokenFile(dir), 'utf8');
  const externalFile = writeRunToken(path.join(dir, 'external.token'));
  const external = fs.readFileSync(externalFile, 'utf8');
  const env = { TBT_POLICY_SYNC_TOKEN_FILE: externalFile };
  assert.equal(policySyncToken(dir, embeddedUrl, env), embedded);
  assert.equal(policySyncToken(dir, externalUrl, env), external);
  assert.notEqual(embedded, external);
  assert.equal(policySyncToken(dir, externalUrl, {}), undefined, 'no variable: no token for an external server');
  // A campaign without an embedded server: the external token, never an old embedded one.
  fs.rmSync(policyServerUrlFile(dir));
  assert.equal(policySyncToken(dir, embeddedUrl, env), external);
});

test('the file TBT_POLICY_SYNC_TOKEN_FILE names must exist, be private and not empty (bad input naming it)', () => {
  const dir = campaignDir();
  const file = path.join(dir, 'sync.token');
  const call = () => policySyncToken(dir, externalUrl, { TBT_POLICY_SYNC_TOKEN_FILE: file });
  assert.throws(
    call,
    (err: Error) => err.name === 'BadInputError' && /TBT_POLICY_SYNC_TOKEN_FILE: cannot read/.test(err.message),
  );
  fs.writeFileSync(file, 'secret-token-value', { mode: 0o644 });
  fs.chmodSync(file, 0o644);
  assert.throws(
    call,
    (err: Error) => /readable by others; chmod 600/.test(err.message) && !/secret-token-value/.test(err.message),
  );
  fs.writeFileSync(file, '  \n');
  fs.chmodSync(file, 0o600);
  assert.throws(call, /is empty/);
  assert.throws(
    () => policySyncToken(dir, externalUrl, { TBT_POLICY_SYNC_TOKEN_FILE: '' }),
    /TBT_POLICY_SYNC_TOKEN_FILE/,
  );
});

test('second review, finding 7 (sync token origins): the external token goes only to tied policy servers', () => {
  const dir = campaignDir();
  const externalFile = writeRunToken(path.join(dir, 'external.token'));
  const external = fs.readFileSync(externalFile, 'utf8');
  const env = { TBT_POLICY_SYNC_TOKEN_FILE: externalFile };
  // A campaign's sync_instances may name any URL: the operator's token goes only where the operator tied it.
  for (const url of ['http://attacker.example:8000/v1', 'https://10.0.0.9/v1', 'http://policy-server:9000/v1'])
    assert.equal(policySyncToken(dir, url, env), undefined, url);
  // Built in: loopback on any port and the compose policy server; more through TBT_API_KEY_HOSTS.
  assert.equal(policySyncToken(dir, externalUrl, env), external);
  assert.equal(policySyncToken(dir, 'http://policy-server:8000/v1', env), external);
  const tied = { ...env, TBT_API_KEY_HOSTS: 'TBT_POLICY_API_KEY=gpu-host:8000' };
  assert.equal(policySyncToken(dir, 'https://gpu-host:8000/v1', tied), external);
  assert.equal(policySyncToken(dir, 'http://gpu-host:8000/v1', tied), undefined, 'https tie, http URL');
  // The embedded token goes to the embedded server's own address only.
  assert.equal(policySyncToken(dir, 'http://127.0.0.1:40001/v2', {}), undefined);
});

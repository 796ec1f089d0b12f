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

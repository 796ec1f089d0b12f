import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { readEnvironment, temporalAddress } from '../config/environment.ts';
import { BadInputError } from '../core/errors.ts';
import {
  connectTemporalClient,
  connectTemporalWorker,
  temporalConnectionSettings,
} from '../infra/temporal-connection.ts';
import { startTlsFrontend, type TlsFrontend } from './helpers/grpc-tls-frontend.ts';
import { env as stackEnv } from './helpers/stack.ts';

/**
 * Issue 21, item 6: every client and worker reaches a TLS / mTLS / API-key Temporal frontend from the environment.
 * The local dev server serves no TLS, so a TLS frontend (test/helpers/grpc-tls-frontend.ts) terminates TLS in front
 * of it with certificates made here by openssl: a CA, a server certificate for "temporal.test" and a client one.
 */

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-temporal-tls-'));
const file = (name: string) => path.join(dir, name);

function openssl(...args: string[]): void {
  execFileSync('openssl', args, { stdio: 'pipe' });
}

function issue(name: string, subject: string, extensions: string): void {
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    file(`${name}.key`),
    '-subj',
    subject,
    '-out',
    file(`${name}.csr`),
  );
  fs.writeFileSync(file(`${name}.ext`), extensions);
  openssl(
    'x509',
    '-req',
    '-in',
    file(`${name}.csr`),
    '-CA',
    file('ca.pem'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    file(`${name}.ext`),
    '-out',
    file(`${name}.pem`),
  );
}

let mtls: TlsFrontend;
let tlsOnly: TlsFrontend;
before(async () => {
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    file('ca.key'),
    '-subj',
    '/CN=tbt test CA',
    '-days',
    '2',
    '-out',
    file('ca.pem'),
  );
  issue('server', '/CN=temporal.test', 'subjectAltName=DNS:temporal.test\nextendedKeyUsage=serverAuth\n');
  issue('client', '/CN=tbt-worker', 'extendedKeyUsage=clientAuth\n');
  const certs = { key: fs.readFileSync(file('server.key')), cert: fs.readFileSync(file('server.pem')) };
  const upstream = temporalAddress(stackEnv);
  mtls = await startTlsFrontend({ upstream, ...certs, clientCa: fs.readFileSync(file('ca.pem')) });
  tlsOnly = await startTlsFrontend({ upstream, ...certs });
});
after(async () => {
  await mtls?.close();
  await tlsOnly?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The environment a worker or the CLI would read, pointed at a frontend. */
function envFor(frontend: TlsFrontend, vars: Record<string, string>) {
  return readEnvironment({
    ...process.env,
    TBT_TEMPORAL_ADDRESS: frontend.address,
    TBT_TEMPORAL_TLS_CA_FILE: file('ca.pem'),
    TBT_TEMPORAL_TLS_SERVER_NAME: 'temporal.test',
    ...vars,
  });
}

const mtlsVars = { TBT_TEMPORAL_TLS_CERT_FILE: file('client.pem'), TBT_TEMPORAL_TLS_KEY_FILE: file('client.key') };

test('mTLS: the client and the worker connection reach the cluster with the client certificate', async () => {
  const env = envFor(mtls, mtlsVars);
  const client = await connectTemporalClient(env, 10_000);
  try {
    const info = await client.workflowService.getSystemInfo({});
    assert.ok(info.serverVersion, 'the dev server answered through the mTLS frontend');
    const ns = await client.workflowService.describeNamespace({ namespace: env.TBT_TEMPORAL_NAMESPACE });
    assert.equal(ns.namespaceInfo?.name, env.TBT_TEMPORAL_NAMESPACE);
  } finally {
    await client.close();
  }
  const worker = await connectTemporalWorker(env); // NativeConnection checks the server at connect
  await worker.close();
  assert.ok(mtls.requestHeaders.length >= 3);
});

test('mTLS: without a client certificate the frontend refuses the connection', async () => {
  await assert.rejects(connectTemporalClient(envFor(mtls, {}), 5_000));
});

test('TLS: a certificate from an unknown CA is refused (the CA file is what the client trusts)', async () => {
  const env = envFor(tlsOnly, { TBT_TEMPORAL_TLS_CA_FILE: file('client.pem') });
  await assert.rejects(connectTemporalClient(env, 5_000));
});

test('API key: clients and workers send it as a bearer token on every call, over TLS', async () => {
  const key = 'tbt-test-api-key-1f2e3d';
  const env = envFor(tlsOnly, { TBT_TEMPORAL_API_KEY: key });
  const before = tlsOnly.requestHeaders.length;
  const client = await connectTemporalClient(env, 10_000);
  await client.workflowService.getSystemInfo({});
  await client.close();
  const worker = await connectTemporalWorker(env);
  await worker.close();
  const sent = tlsOnly.requestHeaders.slice(before);
  assert.ok(sent.length >= 2, `requests seen: ${sent.length}`);
  for (const headers of sent) assert.equal(headers.authorization, `Bearer ${key}`, String(headers[':path']));
});

test('settings: TLS turns on with an API key or a TLS file, and bad settings name the variables', () => {
  const base = { ...process.env, TBT_TEMPORAL_ADDRESS: 'temporal.example:7233' };
  assert.equal(temporalConnectionSettings(readEnvironment(base)).tls, undefined);
  assert.deepEqual(temporalConnectionSettings(readEnvironment({ ...base, TBT_TEMPORAL_API_KEY: 'k' })).tls, {});
  assert.deepEqual(temporalConnectionSettings(readEnvironment({ ...base, TBT_TEMPORAL_TLS: 'true' })).tls, {});
  assert.throws(
    () => temporalConnectionSettings(readEnvironment({ ...base, TBT_TEMPORAL_TLS_CERT_FILE: file('client.pem') })),
    (err: Error) =>
      err instanceof BadInputError && /TBT_TEMPORAL_TLS_CERT_FILE and TBT_TEMPORAL_TLS_KEY_FILE/.test(err.message),
  );
  assert.throws(
    () => temporalConnectionSettings(readEnvironment({ ...base, TBT_TEMPORAL_TLS_CA_FILE: file('missing.pem') })),
    (err: Error) => err instanceof BadInputError && err.message.includes(`TBT_TEMPORAL_TLS_CA_FILE: cannot read`),
  );
});

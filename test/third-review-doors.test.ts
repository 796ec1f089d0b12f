import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import * as indexProxy from '../datasets/thinkingbox/index-proxy.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Third security review (issue 39), findings 5 and 10: doors left open around dataset code.
 *
 * 5. With `prepare-env --allow-urls` a dataset's URL requirements decided where the install proxy connected: an
 *    allowed URL at 127.0.0.1 (or a name resolving there, or a private or metadata address) gave the sandbox a
 *    tunnel to a local service (Temporal on 127.0.0.1:7233 has no authentication). Here the real proxy is given
 *    such destinations as allowed, and a local listener counts what reaches it.
 * 10. Descriptors the worker inherited without close-on-exec reached dataset code. Here a worker stand-in is
 *    started with two (a file holding a secret, a socket) and runs dataset code through the real sandbox.
 */

const work = testTempDir('tbt-third-review-doors-');
fs.chmodSync(work, 0o755);
let listener: net.Server;
let port = 0;
const reached: string[] = [];

before(async () => {
  listener = net.createServer((s) => {
    reached.push(`${s.remoteAddress} -> ${s.localAddress}:${s.localPort}`);
    s.destroy();
  });
  // Every local address, IPv4 and IPv6: whatever way the proxy finds here reaches it.
  await new Promise<void>((resolve) => listener.listen({ port: 0, host: '::', ipv6Only: false }, resolve));
  port = (listener.address() as net.AddressInfo).port;
});
after(() => listener.close());

/** The status line the proxy answers `request` with (sent over its unix socket), or why there was none. */
function ask(socket: string, request: string): Promise<string> {
  return new Promise((resolve) => {
    const client = net.connect(socket);
    let got = '';
    const done = (what: string) => {
      clearTimeout(timer);
      client.destroy();
      resolve(what);
    };
    const timer = setTimeout(() => done(`no answer in 3 s${got ? `: ${got}` : ''}`), 3000);
    client.on('connect', () => client.write(request));
    client.on('data', (c: Buffer) => {
      got += c.toString('latin1');
      if (got.includes('\r\n')) done(got.split('\r\n')[0]!);
    });
    client.on('error', (err) => done(`error ${err.message}`));
    client.on('close', () => done(`closed${got ? `: ${got}` : ''}`));
  });
}

/** This host's own addresses on its interfaces (not link-local IPv6, which needs a scope). */
function ownAddresses(): string[] {
  return Object.values(os.networkInterfaces())
    .flat()
    .flatMap((i) => (i && !i.internal && !i.address.startsWith('fe80:') ? [i.address] : []));
}

const bracket = (host: string) => (host.includes(':') ? `[${host}]` : host);

test('third review, finding 5: the install proxy refuses hosts at loopback, private, metadata addresses', async () => {
  const local = ['localhost', '127.0.0.1', '127.1.2.3', '0.0.0.0', '::1', '::ffff:127.0.0.1', ...ownAddresses()];
  const far = ['10.255.255.1', '169.254.169.254', '100.64.0.1', 'fd12:3456::1'];
  const destinations = [...local.map((h) => `${bracket(h)}:${port}`), ...far.map((h) => `${bracket(h)}:80`)];
  // As --allow-urls feeds them: hostPort() of each allowed URL.
  const allowed = destinations.map((d) => indexProxy.hostPort(new URL(`http://${d}/`)));
  const proxy = indexProxy.startIndexProxy(path.join(work, 'proxy'), allowed, { privateHosts: [] });
  try {
    const answers: string[] = [];
    for (const d of destinations) {
      answers.push(`CONNECT ${d}: ${await ask(proxy.socket, `CONNECT ${d} HTTP/1.1\r\nHost: ${d}\r\n\r\n`)}`);
      answers.push(`GET ${d}: ${await ask(proxy.socket, `GET http://${d}/simple/ HTTP/1.1\r\nHost: ${d}\r\n\r\n`)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
    const expected = answers.map((a) => `${a.slice(0, a.indexOf(': '))}: HTTP/1.1 403 Forbidden`);
    assert.deepEqual(answers, expected, 'the proxy opened a way to a local or private address');
    assert.deepEqual(reached, [], 'the local listener saw a connection through the proxy');
    const refusals = proxy.refusals().join('\n');
    assert.match(refusals, /CONNECT localhost:\d+: .*127\.0\.0\.1/);
    assert.match(refusals, /TBT_INSTALL_PROXY_PRIVATE_HOSTS/);
  } finally {
    proxy.stop();
  }
});

test('third review, finding 5: public addresses pass; a private host only when the operator names it', async () => {
  const refusal = indexProxy.addressRefusal;
  assert.equal(typeof refusal, 'function', 'index-proxy.ts exports no address check');
  // pypi.org, files.pythonhosted.org (Fastly), a GitHub address: each passes.
  for (const address of ['151.101.0.223', '151.101.64.223', '140.82.121.4', '2a04:4e42::223', '::ffff:151.101.0.223'])
    assert.equal(refusal(address), undefined, address);
  for (const address of [
    '127.0.0.1',
    '0.0.0.0',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '100.127.255.255',
    '224.0.0.1',
    '255.255.255.255',
    '::',
    '::1',
    'fd00::2',
    'fc00::1',
    'fe80::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:169.254.169.254',
    '::ffff:10.0.0.1',
    '64:ff9b::a9fe:a9fe',
    '2002:7f00:1::1',
  ])
    assert.ok(refusal(address), `${address} passed the check`);
  // Named by the operator (TBT_INSTALL_PROXY_PRIVATE_HOSTS, an internal mirror): reached.
  const mirror = `localhost:${port}`;
  const proxy = indexProxy.startIndexProxy(path.join(work, 'proxy-mirror'), [mirror], { privateHosts: [mirror] });
  try {
    const before = reached.length;
    assert.equal(await ask(proxy.socket, `CONNECT ${mirror} HTTP/1.1\r\n\r\n`), 'HTTP/1.1 200 Connection Established');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(reached.length, before + 1);
  } finally {
    proxy.stop();
  }
  assert.deepEqual(indexProxy.parsePrivateHosts('mirror.internal:3141, 10.0.0.5 ,[fd00::5]:8080'), [
    'mirror.internal:3141',
    '10.0.0.5:*',
    'fd00::5:8080',
  ]);
});

test('third review, finding 10: dataset code sees only 0, 1 and 2 of the worker descriptors', async () => {
  const secretFile = path.join(work, 'inherited-secret');
  fs.writeFileSync(secretFile, 'finding10-inherited-secret-7d3a', { mode: 0o644 });
  const fd = fs.openSync(secretFile, 'r');
  const scratch = path.join(work, 'scratch');
  fs.mkdirSync(scratch, { mode: 0o755 });
  // Passed as descriptors 100 and 101 of the worker stand-in, after a gap: inherited there without close-on-exec
  // (as from a supervisor or a shell that opened them), which Node leaves as they are.
  const stdio: ('ignore' | 'pipe' | number)[] = ['ignore', 'pipe', 'pipe'];
  while (stdio.length < 100) stdio.push('ignore');
  stdio.push(fd, 'pipe');
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(repoRoot, 'test', 'fixtures', 'third-review-doors', 'fd-worker.ts'), scratch],
    { cwd: repoRoot, stdio },
  );
  fs.closeSync(fd);
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, err.slice(-3000));
  const result = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, any>;
  // Control: the stand-in does hold both, inheritable, and the file's text.
  assert.equal(result.worker.secret, 'finding10-inherited-secret-7d3a');
  assert.match(result.worker.inherited['101'], /^socket:/);
  assert.deepEqual(result.worker.inheritable, [100, 101]);
  assert.equal(result.worker.mode, 'bubblewrap');
  for (const run of ['test', 'server', 'unsandboxed']) {
    const seen = result[run] as Record<string, { target: string; text: string }>;
    assert.deepEqual(
      Object.keys(seen ?? {}),
      ['0', '1', '2'],
      `${run}: dataset code holds descriptors beyond 0-2: ${JSON.stringify(seen)}`,
    );
    assert.equal(JSON.stringify(seen).includes('finding10-inherited-secret'), false, run);
  }
});

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import { workerKinds } from '../../infra/local-workers.ts';
import { metricsBindAddress } from '../../infra/worker-runtime.ts';

/**
 * The workers' Prometheus exporter has no authentication: without a host in TBT_METRICS_PORT it must listen on
 * loopback only, so only processes of this machine can read it; a host is bound only where the operator names it.
 */

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Local addresses (hex, as /proc/net/tcp{,6} write them) of the sockets listening on `port`. */
function listeningAddresses(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return ['/proc/net/tcp', '/proc/net/tcp6']
    .filter((file) => fs.existsSync(file))
    .flatMap((file) => fs.readFileSync(file, 'utf8').split('\n').slice(1))
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields[3] === '0A' && fields[1]?.endsWith(`:${hexPort}`))
    .map((fields) => fields[1]!.split(':')[0]!);
}

test('third review, finding 13: TBT_METRICS_PORT without a host binds loopback only', { timeout: 60_000 }, async () => {
  // A worker's real runtime (one per process, so a child): its exporter's socket as the kernel lists it.
  const port = await freePort();
  const script = [
    "import pino from 'pino';",
    "import { installWorkerRuntime } from './infra/worker-runtime.ts';",
    `installWorkerRuntime(pino({ level: 'silent' }), 'orchestrator', { TBT_METRICS_PORT: '${port}' });`,
    "process.stdout.write('up\\n');",
    'setInterval(() => {}, 1000);',
  ].join('\n');
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('up') && resolve());
      child.once('exit', (code) => reject(new Error(`the worker runtime exited (${code}) before serving`)));
    });
    // The exporter binds on its own thread: wait (bounded) until the kernel lists the socket.
    let addresses = listeningAddresses(port);
    for (let i = 0; i < 100 && addresses.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      addresses = listeningAddresses(port);
    }
    assert.ok(addresses.length > 0, `nothing listens on ${port}`);
    // 0100007F is 127.0.0.1; every interface would be 00000000 (or :: in tcp6).
    assert.deepEqual(addresses, ['0100007F'], `the metrics port listens on ${addresses.join(', ')}`);
  } finally {
    // SIGKILL: the runtime drains on SIGTERM, and a child left running keeps the test runner's stderr open.
    const exited = child.exitCode !== null ? Promise.resolve() : once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }

  assert.deepEqual(
    workerKinds.map((kind) => metricsBindAddress('9464', kind)),
    ['127.0.0.1:9464', '127.0.0.1:9465', '127.0.0.1:9466', '127.0.0.1:9467'],
  );
  assert.equal(metricsBindAddress('0.0.0.0:9464', 'rollout'), '0.0.0.0:9466', 'every interface only when named');
});

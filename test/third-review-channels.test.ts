import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { repoRoot } from '../config/environment.ts';
import { datasetPathPrefix } from '../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox, type LoopbackForward } from '../datasets/thinkingbox/dataset-sandbox.ts';
import type { LaunchSpec } from '../datasets/thinkingbox/server-launch.ts';
import { ServerTemplate } from '../datasets/thinkingbox/server-template.ts';
import { StdioServerPool, type StartedServer } from '../datasets/thinkingbox/stdio-server-pool.ts';

/**
 * Third review (issue 39), findings 2 and 3: the channels from dataset code into the worker that a server
 * template opens (server-template.ts) are read with caps, a deadline and a count limit, as every other one
 * (capped-lines.ts). Real templates under bubblewrap, as in test/server-template.test.ts.
 *
 * 2. A preloaded dependency floods the template's stdout (its `ready` / `forked` lines): before the fix each chunk
 *    rescanned the whole pending line, so 64 MiB without a newline stalled this process's event loop for seconds.
 * 3. A sandboxed server opens thousands of connections to its template's `servers.sock` (or to a loopback relay's
 *    socket) and never sends a byte: before the fix each one held a descriptor of the worker, for ever.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'third-review-channels');
const probeServer = path.join(repoRoot, 'test', 'fixtures', 'dataset-sandbox', 'probe_server.py');
/** How long the worker waits for a connection's header (HEADER_TIMEOUT_MS in server-template.ts). */
const HEADER_DEADLINE_MS = 5000;
let sandbox: DatasetSandbox;

function serverSpec(args: string[], env: Record<string, string> = {}, readOnly: string[] = []): LaunchSpec {
  // PYTHONPATH stands for the dataset's environment, where an installed dependency would be: the template
  // preloads what the server imports from it.
  return {
    command: 'python',
    args,
    env: { PYTHONPATH: path.join(fixtures, 'site'), ...env },
    cwd: fixtures,
    readOnly,
    pathPrefix: datasetPathPrefix(),
  } as LaunchSpec;
}
const probeSpec = { ...serverSpec([probeServer]), cwd: path.dirname(probeServer) } as LaunchSpec;

async function call<T>(server: StartedServer, name: string, args: Record<string, unknown> = {}): Promise<T> {
  // Long enough for the runs before the fix, when the worker relayed 2000 connections.
  const result = await server.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: 300_000 });
  const text = (result.content as { text: string }[])[0]!.text;
  return (text.startsWith('{') ? JSON.parse(text) : text) as T;
}

/** A pool whose servers are all stopped by `run`'s end, whatever fails. */
async function withPool(
  run: (acquire: (name: string, spec: LaunchSpec) => Promise<StartedServer>) => Promise<void>,
  on = sandbox,
): Promise<void> {
  const pool = new StdioServerPool({ warm: 0, sandbox: on, startTimeoutMs: 120_000 });
  const started: StartedServer[] = [];
  try {
    await run(async (name, spec) => {
      const server = await pool.acquire(name, spec);
      started.push(server);
      return server;
    });
  } finally {
    await Promise.all(started.map((s) => s.stop()));
    await pool.close();
  }
}

/**
 * A 10 ms heartbeat: the longest gap between two ticks, and the stall in all (what gaps of over 100 ms took
 * beyond 100 ms). Before the fix the loop ran between reads of the pipe, but each read took up to 0.6 s here.
 */
function heartbeat(): () => { maxGapMs: number; stalledMs: number } {
  let last = performance.now();
  let maxGap = 0;
  let stalled = 0;
  const tick = () => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    stalled += Math.max(0, now - last - 100);
    last = now;
  };
  const timer = setInterval(tick, 10);
  return () => {
    clearInterval(timer);
    tick();
    return { maxGapMs: Math.round(maxGap), stalledMs: Math.round(stalled) };
  };
}

/** Bounds generous for a shared 2-core machine: before the fix the loop stalled for 20 s in all. */
function assertResponsive({ maxGapMs, stalledMs }: { maxGapMs: number; stalledMs: number }): void {
  assert.ok(stalledMs < 1000, `the worker's event loop stalled for ${stalledMs} ms in all while the template flooded`);
  assert.ok(maxGapMs < 1000, `the worker's event loop stalled for ${maxGapMs} ms at once while the template flooded`);
}

const openDescriptors = () => fs.readdirSync('/proc/self/fd').length;

function alive(pid: number | null): boolean {
  try {
    process.kill(pid!, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitUntil(what: string, done: () => boolean, ms: number): Promise<void> {
  for (const end = Date.now() + ms; !done(); await sleep(50))
    if (Date.now() > end) throw new assert.AssertionError({ message: `${what}: not within ${ms} ms` });
}

before(() => {
  sandbox = new DatasetSandbox({ limits: { totalMemoryMb: 1024, scratchMb: 16 }, log: () => undefined });
});

test('third review, finding 2: a template flooding stdout at import is stopped, the loop runs on', async () => {
  const spec = serverSpec(['-m', 'flood_server'], { FLOOD_MIB: '64' });
  const beat = heartbeat();
  const started = Date.now();
  const failure = await ServerTemplate.start('flood', spec, sandbox, 120_000).then(
    (template) => void template.close(),
    (err: Error) => err,
  );
  const loop = beat();
  console.log(
    `# finding 2: 64 MiB at import: ${Date.now() - started} ms; event loop: longest gap ${loop.maxGapMs} ms, ` +
      `stalled ${loop.stalledMs} ms in all`,
  );
  assertResponsive(loop);
  assert.match(
    failure?.message ?? 'the template started',
    /^tool server 'flood' template: wrote a line longer than 65536 bytes, the cap per line; it was stopped/,
  );
  await withPool(async (acquire) => {
    // The pool logs the reason and starts that server cold (its dependency is quiet there); another dataset's
    // server still starts from its own template.
    const flood = await acquire('flood', spec);
    assert.equal(flood.started, 'process');
    assert.equal(await call(flood, 'ping'), 'pong');
    const probe = await acquire('probe', probeSpec);
    assert.equal(probe.started, 'template');
    assert.match((await call<{ cap_eff: string }>(probe, 'probe')).cap_eff, /^0+$/);
  });
});

test('third review, finding 2: a serving template that floods later is stopped, then replaced', async () => {
  const triggers = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-flood-trigger-'));
  fs.chmodSync(triggers, 0o755);
  const trigger = path.join(triggers, 'flood-now');
  const spec = serverSpec(['-m', 'flood_server'], { FLOOD_WHEN: 'later', FLOOD_TRIGGER: trigger }, [triggers]);
  try {
    await withPool(async (acquire) => {
      const first = await acquire('flood-later', spec);
      assert.equal(first.started, 'template');
      assert.equal(await call(first, 'ping'), 'pong');
      const beat = heartbeat();
      fs.writeFileSync(trigger, ''); // the template's thread floods 64 MiB now
      let stopped = true;
      await waitUntil('the forked server ended with its template', () => !alive(first.pid), 45_000).catch(() => {
        stopped = false;
      });
      const loop = beat();
      console.log(
        `# finding 2: 64 MiB from a serving template: event loop: longest gap ${loop.maxGapMs} ms, ` +
          `stalled ${loop.stalledMs} ms in all`,
      );
      assertResponsive(loop);
      assert.ok(stopped, 'the flooding template (and the server it forked) still runs');
      // The episode whose server it was sees why in its stderr tail.
      await waitUntil(
        'the reason in the server stderr',
        () => /template: wrote a line longer/.test(first.stderrTail()),
        5000,
      );
      assert.match(first.stderrTail(), /tool server 'flood-later' template: wrote a line longer than 65536 bytes/);
      fs.rmSync(trigger);
      const second = await acquire('flood-later', spec); // from a fresh template
      assert.equal(second.started, 'template');
      assert.equal(await call(second, 'ping'), 'pong');
    });
  } finally {
    fs.rmSync(triggers, { recursive: true, force: true });
  }
});

test('third review, finding 3: a header is read with a deadline and a count limit, then handed back', async () => {
  // Imported here, so that the rest of the file runs against code without connectionLimit.
  const { connectionLimit, readCappedLines } = await import('../datasets/thinkingbox/capped-lines.ts');
  const caps = { lineBytes: 16, totalBytes: 64, unit: 'header', maxLines: 1, timeoutMs: 300 };
  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  const admit = connectionLimit(2);
  const seen: string[] = [];
  server.on('connection', (socket) => {
    socket.on('error', () => undefined);
    const release = admit(socket);
    if (!release) return seen.push('refused');
    readCappedLines(
      socket,
      caps,
      (header) => {
        release();
        // What followed the header is still there for the next reader.
        socket.once('data', (rest) => seen.push(`${header} then ${rest}`));
        socket.resume();
      },
      (reason) => seen.push(reason),
    );
    socket.resume();
  });
  const connect = () =>
    new Promise<net.Socket>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
      socket.on('error', () => undefined);
    });
  try {
    const silent = [await connect(), await connect()]; // both admitted, neither sends a header
    const extra = await connect();
    await waitUntil('the third connection refused', () => seen.includes('refused'), 2000);
    await waitUntil('the silent ones timed out', () => seen.filter((s) => s.includes('within')).length === 2, 2000);
    assert.deepEqual(seen, ['refused', 'no complete header within 300 ms', 'no complete header within 300 ms']);
    // A timed-out connection frees its place when it has closed, which follows the report: wait for the closes.
    await waitUntil('the silent ones closed', () => silent.every((s) => s.closed), 2000);
    // Once they are gone, connections are admitted again; one sends its header and a payload in one write.
    const talker = await connect();
    talker.write('token io\npayload');
    await waitUntil('the header and its payload', () => seen.length === 4, 2000);
    assert.equal(seen[3], 'token io then payload');
    for (const s of [...silent, extra, talker]) s.destroy();
  } finally {
    server.close();
  }
});

interface Held {
  path: string;
  opened: number;
  errors: string[];
}

test('third review, finding 3: connections to servers.sock that send no header are few and short-lived', async () => {
  await withPool(async (acquire) => {
    const holder = await acquire('holder', serverSpec(['-m', 'holder_server']));
    assert.equal(holder.started, 'template');
    const before = openDescriptors();
    const held = await call<Held>(holder, 'hold', { target: 'servers', count: 3000 });
    assert.match(held.path, /\/servers\.sock$/);
    assert.equal(held.opened, 3000, `connects failed: ${held.errors.join('; ')}`);
    await sleep(500);
    const during = openDescriptors() - before;
    console.log(`# finding 3: ${held.opened} connections to servers.sock: ${during} more descriptors in the worker`);
    assert.ok(
      during <= 80,
      `the worker holds ${during} more descriptors for ${held.opened} connections with no header`,
    );
    // Another episode's server starts meanwhile (another dataset's template), and answers.
    const probe = await acquire('probe', probeSpec);
    assert.equal(probe.started, 'template');
    assert.match((await call<{ cap_eff: string }>(probe, 'probe')).cap_eff, /^0+$/);
    await probe.stop();
    // Past the deadline the admitted ones are closed too, while the holder keeps its ends open.
    await sleep(HEADER_DEADLINE_MS + 1500);
    const after = openDescriptors() - before;
    console.log(`# finding 3: ${after} more descriptors once the header deadline passed`);
    assert.ok(after <= 10, `the worker still holds ${after} more descriptors past the header deadline`);
    // The holder's own template forks again.
    const again = await acquire('holder', serverSpec(['-m', 'holder_server']));
    assert.equal(again.started, 'template');
  });
});

test('third review, finding 3: connections to a loopback relay are capped in number', async () => {
  // The relayed service: a listener in a process of its own, so its end of each connection is not counted here.
  const service = spawn(
    process.execPath,
    [
      '-e',
      "require('net').createServer((s) => s.on('error', () => {})).listen(0, '127.0.0.1', function () {" +
        ' console.log(this.address().port); })',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const port = await new Promise<number>((resolve) => service.stdout.once('data', (d) => resolve(Number(`${d}`))));
    const loopback: LoopbackForward[] = [{ port: 8108, host: '127.0.0.1', hostPort: port }];
    const relayed = new DatasetSandbox({
      limits: { totalMemoryMb: 1024, scratchMb: 16 },
      loopback,
      log: () => undefined,
    });
    await withPool(async (acquire) => {
      const holder = await acquire('holder', serverSpec(['-m', 'holder_server']));
      assert.equal(holder.started, 'template');
      const before = openDescriptors();
      const held = await call<Held>(holder, 'hold', { target: 'relay', count: 2000 });
      assert.match(held.path, /\.net\/8108\.sock$/);
      assert.equal(held.opened, 2000, `connects failed: ${held.errors.join('; ')}`);
      await sleep(1000);
      const during = openDescriptors() - before;
      console.log(`# finding 3: ${held.opened} connections to a relay: ${during} more descriptors in the worker`);
      // Each admitted connection is two descriptors: the sandbox's end and the service's.
      assert.ok(during <= 160, `the worker holds ${during} more descriptors for ${held.opened} relay connections`);
      const probe = await acquire('probe', probeSpec);
      assert.equal(probe.started, 'template');
    }, relayed);
  } finally {
    service.kill('SIGKILL');
  }
});

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { datasetPathPrefix, datasetPython } from '../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';
import { runTestCase, type TestContext } from '../datasets/thinkingbox/test-case-runner.ts';
import { hostileEscape, type HostileEscape } from './fixtures/dataset-sandbox/hostile-escape.ts';
import { testTempDir } from './helpers/temp-dir.ts';
import { delegatedCgroup, pythonBases, runAsUnprivilegedUser, unreadableBy } from './helpers/unprivileged-user.ts';

/**
 * One test per way out of the dataset sandbox (docs/dataset-sandbox.md), each tried by hostile dataset code
 * of our own (test/fixtures/dataset-sandbox) and each blocked: the worker's secrets via the environment and
 * /proc/$PPID/environ, a direct `_socket` connect, the network from a subprocess, writes outside the scratch
 * folder, a grandchild outliving the timeout, a fork bomb, a memory hog (and a CPU spin). The escapes the
 * hostile server tries are first shown to succeed without the sandbox, so the checks can fail.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'dataset-sandbox');
const hostileTests = path.join(fixtures, 'hostile_tests.py');
// Values a worker holds that dataset code must never see.
const secrets = {
  DATABASE_URL: `postgres://tbt_admin:pw-${crypto.randomUUID()}@127.0.0.1:5432/tbt`,
  OPENAI_API_KEY: `sk-${crypto.randomUUID()}`,
  TBT_AGENT_DB_PASSWORD: `agent-${crypto.randomUUID()}`,
};
const saved: Record<string, string | undefined> = {};
const logged: string[] = [];
let sandbox: DatasetSandbox;
let listener: net.Server;
let port = 0;
let connections = 0;
let outside: string;
// A stand-in for the worker: a host process started with the secrets in its environment (/proc/PID/environ
// shows what a process was started with; setting process.env here would not show there).
let decoy: ChildProcess;

before(async () => {
  for (const [k, v] of Object.entries(secrets)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  sandbox = new DatasetSandbox({
    limits: { processes: 40, memoryMb: 1024, cpuSeconds: 30, totalMemoryMb: 256, scratchMb: 32 },
    // Set when this file is re-run as a non-root user (last test): a cgroup root delegated to that user.
    cgroupParent: process.env.TBT_TEST_CGROUP_PARENT || undefined,
    log: (l) => logged.push(l),
  });
  listener = net.createServer((socket) => {
    connections += 1;
    socket.end();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as net.AddressInfo).port;
  decoy = spawn('sleep', ['600'], { env: { ...secrets, PATH: '/usr/bin:/bin' }, stdio: 'ignore' });
  outside = testTempDir('tbt-sandbox-outside-');
  fs.chmodSync(outside, 0o777); // writable by anyone: only the sandbox can stop a write here
});

after(async () => {
  for (const [k, v] of Object.entries(saved))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  decoy.kill('SIGKILL');
  await new Promise<void>((resolve) => listener.close(() => resolve()));
  fs.rmSync(outside, { recursive: true, force: true });
});

/** Host processes whose command line holds `token` (the host's view, outside every namespace). */
function processesWith(token: string): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(token)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

async function waitFor(check: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return check();
}

/** Starts the hostile tool server through the real pool and calls its `escape` tool. */
function escapeFromToolServer(
  on: DatasetSandbox,
  targets: string[],
  token = '',
  beforeTeardown = (): void => undefined,
): Promise<HostileEscape> {
  const env = { HOSTILE_OWN_SETTING: 'kept' };
  return hostileEscape({ sandbox: on, port, targets, token, env, timeoutMs: 60_000, beforeTeardown });
}

const ctx = (effects: Record<string, unknown>): TestContext => ({
  effects,
  response: '',
  tool_calls: [],
  messages: [],
  init_result: {},
  session_id: 'sandbox-test',
  metadata: {},
  tool_direct_responses: [],
});

function assertNoSecret(where: string, text: string): void {
  for (const [name, value] of Object.entries(secrets))
    assert.ok(!text.includes(value), `${where} shows the worker's ${name}`);
}

test('without bubblewrap dataset code is refused unless --unsandboxed is given; the mode is always logged', (t) => {
  t.diagnostic(logged.join(' '));
  assert.match(logged.join('\n'), /\[dataset-sandbox\] mode=bubblewrap: user, pid, network, mount/);
  assert.throws(
    () => new DatasetSandbox({ bwrap: '/nonexistent/bwrap', log: () => undefined }),
    (err: Error) => {
      assert.equal(err.name, 'InfrastructureError');
      assert.match(err.message, /dataset code is refused: no working sandbox.*--unsandboxed/s);
      return true;
    },
  );
  const lines: string[] = [];
  const unsafe = new DatasetSandbox({ bwrap: '/nonexistent/bwrap', unsandboxed: true, log: (l) => lines.push(l) });
  assert.equal(unsafe.mode, 'unsandboxed');
  assert.match(lines.join('\n'), /mode=UNSANDBOXED/);
});

test('control: without the sandbox the hostile server does get out (so the checks below can fail)', async () => {
  const unsafe = new DatasetSandbox({ bwrap: '/nonexistent/bwrap', unsandboxed: true, log: () => undefined });
  const target = path.join(outside, 'unsandboxed.txt');
  const before = connections;
  const found = await escapeFromToolServer(unsafe, [target]);
  assert.ok(
    Object.values(found.proc_environ).some((e) => e.includes(secrets.DATABASE_URL)),
    "the worker stand-in's secrets were not visible",
  );
  assert.equal(found.socket_connect, 'connected');
  assert.equal(found.subprocess_connect, 'connected');
  assert.equal(found.writes[target], 'written');
  assert.ok(connections > before);
});

test(
  'environ: a tool server sees only its allow-list, never the worker secrets, not even via ' + '/proc/$PPID/environ',
  async () => {
    const found = await escapeFromToolServer(sandbox, []);
    assert.deepEqual(Object.keys(found.own_environ).sort(), [
      'HOME',
      'HOSTILE_OWN_SETTING',
      'LANG',
      'LOGNAME',
      'PATH',
      'PWD',
      'PYTHONDONTWRITEBYTECODE',
      'SHELL',
      'TERM',
      'TMPDIR',
      'USER',
    ]);
    assert.equal(found.own_environ.HOSTILE_OWN_SETTING, 'kept');
    assertNoSecret('/proc/$PPID/environ', found.parent_environ);
    // Its own pid namespace: the only processes it sees are its sandbox's.
    assert.ok(Object.keys(found.proc_cmdline).length <= 4, `sees ${Object.keys(found.proc_cmdline).length} processes`);
    for (const [pid, text] of [...Object.entries(found.proc_environ), ...Object.entries(found.proc_cmdline)])
      assertNoSecret(`/proc/${pid}`, text);
  },
);

test('environ: test code cannot read the worker secrets via /proc/$PPID/environ either', async () => {
  const outcome = await runTestCase({
    file: hostileTests,
    function: 'test_parent_environ',
    context: ctx({}),
    timeoutMs: 30_000,
    python: datasetPython(),
    sandbox,
  });
  assert.equal(outcome.status, 'fail');
  const found = JSON.parse(outcome.message) as { parent_environ: string; own_environ: Record<string, string> };
  assertNoSecret('/proc/$PPID/environ of test code', found.parent_environ);
  assertNoSecret('the environment of test code', JSON.stringify(found.own_environ));
});

test('_socket direct connect and network from a subprocess (python, bash /dev/tcp) are blocked', async () => {
  const before = connections;
  const found = await escapeFromToolServer(sandbox, []);
  assert.notEqual(found.socket_connect, 'connected');
  assert.match(found.socket_connect, /ConnectionRefused|Network is unreachable|OSError/);
  assert.notEqual(found.subprocess_connect, 'connected');
  assert.notEqual(found.bash_connect, 'connected');
  assert.equal(connections, before, 'the host listener saw a connection');
});

test('writes outside the scratch folder fail; the scratch folder is writable and removed afterwards', async () => {
  const targets = [
    path.join(outside, 'escaped.txt'),
    path.join(fixtures, 'escaped.txt'),
    path.join(repoRoot, 'escaped.txt'),
    '/etc/escaped',
    '/usr/escaped',
    '/dev/shm/escaped',
    '/escaped',
  ];
  const scratchRoot = path.join(process.env.TBT_STATE_DIR ?? path.join(repoRoot, '.state'), 'dataset-scratch');
  const found = await escapeFromToolServer(sandbox, targets);
  for (const t of targets) {
    assert.notEqual(found.writes[t], 'written', `wrote ${t}`);
    assert.ok(!fs.existsSync(t), `${t} exists on the host`);
  }
  assert.equal(found.scratch_write, 'written');
  const home = found.own_environ.HOME!;
  assert.ok(home.startsWith(scratchRoot), home);
  assert.ok(!fs.existsSync(home), 'the scratch folder outlived the server');
});

test('a grandchild in its own session does not survive the test timeout', { timeout: 60_000 }, async () => {
  const token = `tbt-grandchild-${crypto.randomUUID()}`;
  const run = runTestCase({
    file: hostileTests,
    function: 'test_leaves_a_grandchild',
    context: ctx({ token }),
    timeoutMs: 4_000,
    python: datasetPython(),
    sandbox,
  });
  const seen = waitFor(() => processesWith(token).length > 0, 4_000);
  await assert.rejects(run, /did not finish within 4000 ms/);
  assert.ok(await seen, 'the grandchild never started (the test would prove nothing)');
  assert.ok(await waitFor(() => processesWith(token).length === 0, 3_000), `left: ${processesWith(token)}`);
});

test("a tool server's grandchild in its own session dies at the server's teardown", async () => {
  const token = `tbt-server-grandchild-${crypto.randomUUID()}`;
  let alive = 0;
  // The server returns once its grandchild said "ready"; it is looked for before the teardown, not sampled.
  const found = await escapeFromToolServer(sandbox, [], token, () => (alive = processesWith(token).length));
  assert.equal(found.grandchild, 'ready');
  assert.ok(alive > 0, 'the grandchild is not seen from the host (the test would prove nothing)');
  assert.ok(await waitFor(() => processesWith(token).length === 0, 5_000), `left: ${processesWith(token)}`);
});

test('a fork bomb stops at the process limit and dies with the test', { timeout: 60_000 }, async (t) => {
  const token = `tbt-forkbomb-${crypto.randomUUID()}`;
  let most = 0;
  const sampler = setInterval(() => {
    most = Math.max(most, processesWith(token).length);
  }, 50);
  try {
    await assert.rejects(
      runTestCase({
        file: hostileTests,
        function: 'test_fork_bomb',
        context: ctx({ token }),
        timeoutMs: 5_000,
        python: datasetPython(),
        sandbox,
      }),
      /did not finish within 5000 ms/,
    );
  } finally {
    clearInterval(sampler);
  }
  t.diagnostic(`most processes seen at once: ${most} (limit ${sandbox.limits.processes})`);
  assert.ok(most >= 20, `the bomb reached only ${most} processes (it did not run)`);
  assert.ok(most <= sandbox.limits.processes, `${most} processes > limit ${sandbox.limits.processes}`);
  assert.ok(await waitFor(() => processesWith(token).length === 0, 3_000), `left: ${processesWith(token).length}`);
});

test('a memory hog cannot allocate past the memory limit', { timeout: 60_000 }, async () => {
  await assert.rejects(
    runTestCase({
      file: hostileTests,
      function: 'test_memory_hog',
      context: ctx({ bytes: 2 * sandbox.limits.memoryMb * 1024 * 1024 }),
      timeoutMs: 30_000,
      python: datasetPython(),
      sandbox,
    }),
    /raised an error: MemoryError/,
  );
  // The same code under the limit does allocate (so the limit, not the code, stopped it above).
  const small = await runTestCase({
    file: hostileTests,
    function: 'test_memory_hog',
    context: ctx({ bytes: 64 * 1024 * 1024 }),
    timeoutMs: 30_000,
    python: datasetPython(),
    sandbox,
  });
  assert.equal(small.status, 'fail');
  assert.match(small.message, /allocated 67108864 bytes/);
});

test('a CPU spin is stopped by the CPU limit before the wall-clock timeout', { timeout: 60_000 }, async () => {
  const tight = new DatasetSandbox({ limits: { cpuSeconds: 2 }, log: () => undefined });
  const started = Date.now();
  await assert.rejects(
    runTestCase({
      file: hostileTests,
      function: 'test_cpu_spin',
      context: ctx({}),
      timeoutMs: 40_000,
      python: datasetPython(),
      sandbox: tight,
    }),
    /exited .* without a result/,
  );
  assert.ok(Date.now() - started < 30_000);
});

/** Runs `python3 -c code` in `on` and returns its stdout (async: the loopback relay lives in this process). */
function runPython(on: DatasetSandbox, code: string, network: 'none' | 'loopback'): Promise<string> {
  const run = on.prepare({
    command: 'python3',
    args: ['-c', code],
    pathPrefix: datasetPathPrefix(),
    label: 'net',
    network,
  });
  return new Promise((resolve, reject) => {
    const child = spawn(run.command, run.args, { env: run.env, cwd: run.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('close', () => {
      run.dispose();
      resolve(out.trim());
    });
  });
}

test(
  'tool servers reach only their configured loopback ports; test code reaches none',
  { timeout: 60_000 },
  async () => {
    const service = net.createServer((socket) => socket.end('hello from the search service\n'));
    await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
    const servicePort = (service.address() as net.AddressInfo).port;
    const forwarding = new DatasetSandbox({
      loopback: [{ port: 8108, host: '127.0.0.1', hostPort: servicePort }],
      log: () => undefined,
    });
    const dial = (p: number) =>
      [
        'import socket',
        'try:',
        `    s = socket.create_connection(("127.0.0.1", ${p}), timeout=5); print(s.recv(100).decode().strip())`,
        'except OSError as e:',
        '    print(type(e).__name__)',
      ].join('\n');
    try {
      assert.equal(await runPython(forwarding, dial(8108), 'loopback'), 'hello from the search service');
      const before = connections;
      assert.match(await runPython(forwarding, dial(port), 'loopback'), /ConnectionRefused/);
      assert.match(await runPython(forwarding, dial(8108), 'none'), /ConnectionRefused/);
      assert.equal(connections, before);
    } finally {
      await new Promise<void>((resolve) => service.close(() => resolve()));
    }
  },
);

test('second review, finding 1: no helper from a dataset PATH; the dataset env reaches the code only', async () => {
  // A hostile dataset venv: every helper name the sandbox uses, each leaving a marker if it ever runs.
  const venvBin = testTempDir('tbt-hostile-venv-');
  fs.chmodSync(venvBin, 0o755); // the sandboxed code's own uid reads its venv
  const marker = path.join(outside, `helper-ran-${crypto.randomUUID()}`);
  for (const name of ['prlimit', 'bwrap', 'setpriv', 'unshare', 'env', 'python3'])
    fs.writeFileSync(path.join(venvBin, name), `#!/bin/sh\necho ${name} >> ${marker}\nexit 0\n`, { mode: 0o755 });
  for (const [mode, on] of [
    ['bubblewrap', sandbox],
    ['unsandboxed', new DatasetSandbox({ bwrap: '/nonexistent/bwrap', unsandboxed: true, log: () => undefined })],
  ] as const) {
    const run = on.prepare({
      command: '/usr/bin/python3',
      args: ['-c', 'import os; print(os.environ.get("HOSTILE"), os.environ["PATH"].split(":")[0])'],
      pathPrefix: [venvBin],
      env: { PATH: `${venvBin}:/usr/bin:/bin`, LD_PRELOAD: '/nonexistent/evil.so', HOSTILE: 'set' },
      label: 'helpers',
    });
    assert.equal(run.mode, mode);
    // What runs on the host: an absolute path and a fixed environment without any dataset value.
    assert.ok(path.isAbsolute(run.command) && !run.command.startsWith(venvBin), run.command);
    assert.deepEqual(Object.keys(run.env).sort(), ['HOME', 'LANG', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER']);
    assert.ok(!run.env.PATH!.includes(venvBin));
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(run.command, run.args, { env: run.env, cwd: run.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      child.stdout.on('data', (c: Buffer) => (text += c.toString()));
      child.on('error', reject);
      child.on('close', () => resolve(text.trim()));
    });
    run.dispose();
    // The code itself gets the dataset's environment.
    assert.equal(out, `set ${venvBin}`, mode);
    const ran = fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8') : '';
    assert.equal(ran, '', `dataset venv helpers ran (${mode})`);
  }
  fs.rmSync(venvBin, { recursive: true, force: true });
});

/** Whether `on` bounds each sandbox as a whole with a cgroup (else the documented fallback applies). */
const hasCgroups = (on: DatasetSandbox) => !/per-sandbox limits: none/.test(on.describe());

test(
  'second review, finding 6: a fork bomb is bounded per sandbox, and another sandbox still starts meanwhile',
  { timeout: 60_000 },
  async (t) => {
    const token = `tbt-forkbomb6-${crypto.randomUUID()}`;
    let most = 0;
    const sampler = setInterval(() => (most = Math.max(most, processesWith(token).length)), 50);
    const bomb = runTestCase({
      file: hostileTests,
      function: 'test_fork_bomb',
      context: ctx({ token }),
      timeoutMs: 8_000,
      python: datasetPython(),
      sandbox,
    }).then(
      () => undefined,
      (err: Error) => err,
    );
    let other = '';
    try {
      assert.ok(await waitFor(() => processesWith(token).length >= 10, 6_000), 'the bomb did not run');
      // Full: the count has stopped growing (the bomb retries every 50 ms once a fork is refused).
      let seen = -1;
      let steady = 0;
      await waitFor(() => {
        const now = processesWith(token).length;
        steady = now === seen ? steady + 1 : 0;
        seen = now;
        return steady >= 10;
      }, 6_000);
      // While the bomb holds its sandbox's whole budget, a sandbox beside it (same worker, same uid when the
      // worker is not root) starts and runs.
      other = await runPython(sandbox, 'print("alive")', 'none');
    } finally {
      clearInterval(sampler);
    }
    assert.match(String((await bomb)?.message), /did not finish within 8000 ms/);
    assert.equal(other, 'alive');
    t.diagnostic(`most bomb processes at once: ${most} (sandbox limit ${sandbox.limits.processes})`);
    assert.ok(most <= sandbox.limits.processes, `${most} processes > limit ${sandbox.limits.processes}`);
    assert.ok(await waitFor(() => processesWith(token).length === 0, 3_000), `left: ${processesWith(token).length}`);
  },
);

test(
  'second review, finding 6: a memory balloon spread over many processes is stopped at the sandbox total',
  { timeout: 90_000 },
  async (t) => {
    const total = (sandbox.limits as { totalMemoryMb?: number }).totalMemoryMb ?? 256;
    const each = 48 * 1024 * 1024; // far under the per-process limit (memoryMb 1024)
    const count = 8; // 384 MiB of balloons against a 256 MiB sandbox
    const outcome = await runTestCase({
      file: hostileTests,
      function: 'test_memory_balloon',
      context: ctx({ each_bytes: each, count }),
      timeoutMs: 60_000,
      python: datasetPython(),
      sandbox,
    });
    assert.equal(outcome.status, 'fail', outcome.message);
    const found = JSON.parse(outcome.message) as { rss_bytes: number; swap_bytes: number; killed: number };
    t.diagnostic(`balloons: ${JSON.stringify(found)}, sandbox total ${total} MiB; ${sandbox.describe()}`);
    if (!hasCgroups(sandbox)) {
      // The fallback bounds each process only (RLIMIT_AS), and the mode line says so.
      assert.match(sandbox.describe(), /memory per process only/);
      return;
    }
    assert.ok(found.killed >= 1, `no balloon was killed: ${JSON.stringify(found)}`);
    // Swapped-out pages count: a group whose pages went to swap would hold its balloons without a kill.
    const held = found.rss_bytes + found.swap_bytes;
    assert.ok(held <= total * 1024 * 1024, `the balloons hold ${held} bytes (RAM and swap) > ${total} MiB`);
  },
);

/** Fills HOME, TMPDIR and /tmp of a sandboxed process until refused; the host's view of its scratch folder
 * is taken while the process still runs. */
async function fillScratch(on: DatasetSandbox, upTo: number) {
  const code = [
    'import errno, json, os, sys',
    'found = {}',
    'for d in (os.environ["HOME"], os.environ["TMPDIR"], "/tmp"):',
    '    written, error, i = 0, None, 0',
    '    try:',
    '        while written < int(sys.argv[1]):',
    '            with open(os.path.join(d, f"fill-{i}"), "wb") as f:',
    '                for _ in range(4):',
    '                    f.write(b"x" * (1 << 20)); f.flush(); written += 1 << 20',
    '            i += 1',
    '    except OSError as e:',
    '        error = errno.errorcode.get(e.errno, str(e.errno))',
    '    found[d] = {"written": written, "error": error}',
    'print(json.dumps(found), flush=True)',
    'sys.stdin.read()',
  ].join('\n');
  const run = on.prepare({
    command: 'python3',
    args: ['-c', code, String(upTo)],
    pathPrefix: datasetPathPrefix(),
    label: 'fill',
  });
  const child = spawn(run.command, run.args, { env: run.env, cwd: run.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  const line = await new Promise<string>((resolve) => {
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.on('close', () => resolve(out));
  });
  const hostBytes = (dir: string): number =>
    fs.existsSync(dir)
      ? fs
          .readdirSync(dir, { withFileTypes: true, recursive: true })
          .filter((e) => e.isFile())
          .reduce((sum, e) => sum + fs.statSync(path.join(e.parentPath, e.name)).size, 0)
      : 0;
  const onHost = hostBytes(run.scratch);
  child.stdin.end();
  await closed;
  run.dispose();
  assert.ok(line.startsWith('{'), `no result: ${line} ${err}`);
  return { found: JSON.parse(line) as Record<string, { written: number; error: string | null }>, onHost };
}

test(
  'second review, finding 6: scratch space filled past its cap is refused (ENOSPC); the host disk is untouched',
  { timeout: 60_000 },
  async (t) => {
    const cap = ((sandbox.limits as { scratchMb?: number }).scratchMb ?? 32) * 1024 * 1024;
    const { found, onHost } = await fillScratch(sandbox, 3 * cap);
    t.diagnostic(`filled: ${JSON.stringify(found)}; bytes in the host's scratch folder: ${onHost}`);
    const home = Object.keys(found)[0]!;
    const tmpdir = Object.keys(found)[1]!;
    for (const [dir, r] of Object.entries(found)) assert.equal(r.error, 'ENOSPC', `${dir}: ${JSON.stringify(r)}`);
    // HOME and TMPDIR share the scratch folder's cap; /tmp has one of its own.
    assert.ok(found[home]!.written + found[tmpdir]!.written <= cap, JSON.stringify(found));
    assert.ok(found['/tmp']!.written <= cap, JSON.stringify(found));
    assert.equal(onHost, 0, 'the scratch files were written to the host disk');
  },
);

test('second review, finding 6: without cgroups the mode line states the weaker fallback', async () => {
  const lines: string[] = [];
  const fallback = new DatasetSandbox({
    limits: { processes: 40, scratchMb: 16 },
    cgroups: false,
    log: (l) => lines.push(l),
  } as ConstructorParameters<typeof DatasetSandbox>[0]);
  assert.match(lines.join('\n'), /per-sandbox limits: none \(cgroups off\): processes by RLIMIT_NPROC/);
  assert.match(lines.join('\n'), /memory per process only/);
  // The scratch cap does not need cgroups.
  const { found } = await fillScratch(fallback, 3 * 16 * 1024 * 1024);
  assert.equal(Object.values(found)[0]!.error, 'ENOSPC');
});

const asUnprivileged = process.env.TBT_TEST_AS_UNPRIVILEGED === '1';

test(
  'second review, non-root: the hostile tests of this file pass as an unprivileged user too',
  { timeout: 400_000, skip: asUnprivileged || process.getuid?.() !== 0 ? 'already not root' : false },
  async (t) => {
    const python = datasetPython();
    const venv = path.dirname(path.dirname(python));
    const needed = [repoRoot, process.execPath, venv, ...pythonBases(venv)];
    const unreadable = unreadableBy(needed);
    t.diagnostic(`not readable by uid 65534 (exposed for the run): ${JSON.stringify(unreadable)}`);
    const cgroup = delegatedCgroup();
    try {
      const run = await runAsUnprivilegedUser(
        [process.execPath, '--import', 'tsx', '--test', '--test-reporter=tap', 'test/dataset-sandbox.test.ts'],
        {
          cwd: repoRoot,
          env: { TBT_TEST_AS_UNPRIVILEGED: '1', ...(cgroup ? { TBT_TEST_CGROUP_PARENT: cgroup.parent } : {}) },
          expose: unreadable.map((u) => u.path),
          timeoutMs: 380_000,
        },
      );
      const summary = ['tests', 'pass', 'fail', 'skipped']
        .map((k) => new RegExp(`^# ${k} \\d+$`, 'm').exec(run.output)?.[0])
        .join(', ');
      t.diagnostic(`as uid 65534 (${cgroup ? 'delegated cgroup' : 'no cgroup'}): ${summary}`);
      for (const line of run.output.match(/^\s*# (most bomb|balloons|filled).*$/gm) ?? []) t.diagnostic(line.trim());
      assert.match(run.output, /^# fail 0$/m, run.output.slice(-6000));
      assert.match(run.output, /^# pass (1\d|[2-9]\d)$/m, summary);
      assert.match(run.output, /mode=bubblewrap: user, pid/, 'the child did not run sandboxed');
      assert.equal(run.code, 0, summary);
    } finally {
      cgroup?.remove();
    }
  },
);

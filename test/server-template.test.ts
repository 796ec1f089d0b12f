import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { repoRoot } from '../config/environment.ts';
import { datasetPathPrefix } from '../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';
import { StdioServerPool, type StartedServer } from '../datasets/thinkingbox/stdio-server-pool.ts';

/**
 * Tool servers forked from a template (server-template.ts): each is as fresh and as contained as a cold start.
 * The sandbox's own containment tests (dataset-sandbox.test.ts) run their tool servers through templates too.
 */

const probeServer = path.join(repoRoot, 'test', 'fixtures', 'dataset-sandbox', 'probe_server.py');
const spec = {
  command: 'python',
  args: [probeServer],
  env: {},
  cwd: path.dirname(probeServer),
} as Parameters<StdioServerPool['acquire']>[1];
const totalMemoryMb = 192;
let sandbox: DatasetSandbox;

interface Probe {
  proc_pid: string;
  home: string[];
  tmp: string[];
  cap_eff: string;
  other_environ: string;
  other_mem: string;
}

async function probe(server: StartedServer, write = '', other = ''): Promise<Probe> {
  const result = await server.client.callTool({ name: 'probe', arguments: { write, other } }, CallToolResultSchema);
  return JSON.parse((result.content as { text: string }[])[0]!.text) as Probe;
}

/** The memory limit of the cgroup a host pid is in (v1 memory controller or v2), in bytes. */
function memoryLimitOf(pid: number): number {
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  if (v1) return Number(fs.readFileSync(`/sys/fs/cgroup/memory${v1.split(':')[2]}/memory.limit_in_bytes`, 'utf8'));
  const v2 = lines.find((l) => l.startsWith('0::'))!;
  return Number(fs.readFileSync(`/sys/fs/cgroup${v2.slice(3)}/memory.max`, 'utf8'));
}

before(() => {
  sandbox = new DatasetSandbox({ limits: { totalMemoryMb, scratchMb: 16 }, log: () => undefined });
});

test('servers forked from one template share no scratch, memory, capability or cgroup', async () => {
  const pool = new StdioServerPool({ warm: 0, sandbox, pathPrefix: datasetPathPrefix() });
  const started: StartedServer[] = []; // stopped whatever fails: a live server would keep the test process alive
  const acquire = async () => {
    const server = await pool.acquire('probe', spec);
    started.push(server);
    return server;
  };
  try {
    const [a, b] = await Promise.all([acquire(), acquire()]);
    assert.equal(a.started, 'template');
    assert.equal(b.started, 'template');
    const seenByA = await probe(a, 'a-was-here.txt');
    assert.ok(seenByA.home.includes('a-was-here.txt'), `A's own file is missing: ${seenByA.home}`);
    assert.ok(seenByA.tmp.includes('a-was-here.txt'), `A's own /tmp file is missing: ${seenByA.tmp}`);
    const seenByB = await probe(b, '', seenByA.proc_pid);
    assert.notEqual(seenByB.proc_pid, seenByA.proc_pid);
    assert.ok(!seenByB.home.includes('a-was-here.txt'), `B sees A's scratch: ${seenByB.home}`);
    assert.ok(!seenByB.tmp.includes('a-was-here.txt'), `B sees A's /tmp: ${seenByB.tmp}`);
    assert.equal(seenByB.other_environ, '<PermissionError>');
    assert.equal(seenByB.other_mem, '<PermissionError>');
    assert.match(seenByB.cap_eff, /^0+$/);
    await a.stop();
    // The next server of the same template starts from clean scratch too.
    const c = await acquire();
    const seenByC = await probe(c);
    assert.deepEqual(seenByC.home, ['tmp']);
    // (/tmp holds at most the folders leading to what is bound below it, as in a cold start.)
    assert.ok(!seenByC.tmp.includes('a-was-here.txt'), `C sees A's /tmp: ${seenByC.tmp}`);
    if (!/per-sandbox limits: none/.test(sandbox.describe())) {
      // Each forked server is in a cgroup of its own with the sandbox's total (moved there before it ran).
      assert.equal(memoryLimitOf(b.pid!), totalMemoryMb * 1024 * 1024);
      assert.equal(memoryLimitOf(c.pid!), totalMemoryMb * 1024 * 1024);
      assert.notEqual(
        fs.readFileSync(`/proc/${b.pid}/cgroup`, 'utf8'),
        fs.readFileSync(`/proc/${c.pid}/cgroup`, 'utf8'),
      );
    }
  } finally {
    await Promise.all(started.map((s) => s.stop()));
    await pool.close();
  }
});

test("server_start 'process' spawns each server cold", async () => {
  const pool = new StdioServerPool({ warm: 0, sandbox, pathPrefix: datasetPathPrefix(), serverStart: 'process' });
  try {
    const server = await pool.acquire('probe', spec);
    try {
      assert.equal(server.started, 'process');
      assert.match((await probe(server)).cap_eff, /^0+$/);
    } finally {
      await server.stop();
    }
  } finally {
    await pool.close();
  }
});

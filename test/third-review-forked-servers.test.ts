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
 * Third review (issue 39), findings 4 and 11: servers forked from one template (server-template.ts) each have
 * the sandbox's process limit to themselves, and start from random state of their own.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'third-review-forked');
const spec = {
  command: 'python',
  args: ['-m', 'forked_server'],
  // Its dependency rng_at_import is on the path, as an installed package would be: the template preloads it.
  env: { PYTHONPATH: path.join(fixtures, 'site') },
  cwd: fixtures,
} as Parameters<StdioServerPool['acquire']>[1];
/** Enough memory for a few hundred forked interpreters: the process limit, not memory, refuses the fork bomb. */
const totalMemoryMb = 2048;
/** The bomb stops here even where nothing refuses it first (before the fix: the uid's RLIMIT_NPROC of 256). */
const bombCap = 300;
let sandbox: DatasetSandbox;

async function call<T>(server: StartedServer, name: string, args: Record<string, unknown> = {}): Promise<T> {
  const result = await server.client.callTool({ name, arguments: args }, CallToolResultSchema);
  return JSON.parse((result.content as { text: string }[])[0]!.text) as T;
}

/** The parent of a host pid: for a forked server, its template. */
function parentOf(pid: number): number {
  return Number(/^PPid:\s+(\d+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

/** A pool whose servers are all stopped by `run`'s end, whatever fails. */
async function withPool(run: (acquire: () => Promise<StartedServer>) => Promise<void>): Promise<void> {
  const pool = new StdioServerPool({ warm: 0, sandbox, pathPrefix: datasetPathPrefix() });
  const started: StartedServer[] = [];
  try {
    await run(async () => {
      const server = await pool.acquire('forked', spec);
      started.push(server);
      return server;
    });
  } finally {
    await Promise.all(started.map((s) => s.stop()));
    await pool.close();
  }
}

before(() => {
  sandbox = new DatasetSandbox({ limits: { totalMemoryMb, scratchMb: 16 }, log: () => undefined });
});

test("third review, finding 4: a forked server's fork bomb stops neither its template nor others", async (t) => {
  // (Without per-sandbox cgroups every sandbox of a worker that is not root, cold or forked, counts against the
  // worker uid's one process limit; a worker that is root starts servers cold: the next test.)
  if (/per-sandbox limits: none/.test(sandbox.describe())) return t.skip('no per-sandbox cgroups here');
  await withPool(async (acquire) => {
    const before = await acquire();
    const bomber = await acquire();
    assert.equal(before.started, 'template');
    assert.equal(bomber.started, 'template');
    const template = parentOf(before.pid!);
    const bomb = await call<{ forked: number; error: string }>(bomber, 'bomb', { limit: bombCap });
    t.diagnostic(`the bomb forked ${bomb.forked} processes, then: ${bomb.error || 'stopped at the cap'}`);
    // Refused by its own limit (the sandbox's 256 processes), not by the test's cap.
    assert.ok(bomb.forked < bombCap && bomb.forked >= sandbox.limits.processes - 8, JSON.stringify(bomb));
    // While the bomb's processes live: another episode's server starts from the same template, answers, and can
    // start processes of its own; the server forked before the bomb still answers.
    const during = await acquire();
    assert.equal(during.started, 'template');
    assert.equal(parentOf(during.pid!), template);
    assert.deepEqual(await call(during, 'bomb', { limit: 8 }), { forked: 8, error: '' });
    assert.deepEqual(await call(before, 'ping'), {});
    // The template survives the bomb: once it is stopped, its next fork works too.
    await bomber.stop();
    const after = await acquire();
    assert.equal(after.started, 'template');
    assert.equal(parentOf(after.pid!), template);
    assert.deepEqual(await call(after, 'ping'), {});
    assert.deepEqual(await call(before, 'ping'), {});
  });
});

test('third review, finding 4: as root without per-sandbox cgroups, servers start cold', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('not root: every sandbox has the worker uid, cold or forked');
  // There a cold start's process limit is RLIMIT_NPROC of a fresh uid; forked servers would share their
  // template's uid, and with it one limit.
  const noCgroups = new DatasetSandbox({ limits: { scratchMb: 16 }, cgroups: false, log: () => undefined });
  const pool = new StdioServerPool({ warm: 0, sandbox: noCgroups, pathPrefix: datasetPathPrefix() });
  try {
    const server = await pool.acquire('forked', spec);
    try {
      assert.equal(server.started, 'process');
      assert.deepEqual(await call(server, 'ping'), {});
    } finally {
      await server.stop();
    }
  } finally {
    await pool.close();
  }
});

interface Drawn {
  instance: number;
  global: number;
  hash: number;
  preloaded: boolean;
}

test('third review, finding 11: servers forked from one template draw different random numbers', async () => {
  let first: Drawn | undefined;
  await withPool(async (acquire) => {
    const [a, b] = await Promise.all([acquire(), acquire()]);
    assert.equal(a.started, 'template');
    assert.equal(b.started, 'template');
    const [drawnA, drawnB] = [await call<Drawn>(a, 'rng'), await call<Drawn>(b, 'rng')];
    // The dependency (and its random.Random()) was made in the template, before either fork.
    assert.ok(drawnA.preloaded && drawnB.preloaded, 'rng_at_import was not preloaded by the template');
    assert.notEqual(drawnA.instance, drawnB.instance, 'a preloaded random.Random() gave both episodes one value');
    assert.notEqual(drawnA.global, drawnB.global, 'the random module gave both episodes one value');
    first = drawnA;
  });
  // The string hash seed is fixed when an interpreter starts: the forks of one template share it (a design
  // limit, docs/dataset-sandbox.md), but another template (another pool here) has its own.
  await withPool(async (acquire) => {
    const other = await call<Drawn>(await acquire(), 'rng');
    assert.notEqual(other.hash, first!.hash, 'two templates share one string hash seed');
  });
});

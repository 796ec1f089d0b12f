import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, test } from 'node:test';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { TYPESENSE_API_KEY } from '../../infra/typesense-standin.ts';

/**
 * The Typesense stand-in (thinkingbox/tbt_thinkingbox/typesense_standin.py) is one process shared by every
 * sandbox on the machine: what one dataset's tool server stores there is outside every sandbox's limits. Third
 * review, finding 12: a 200 MiB import left it at 469 MB resident. These run the real stand-in and read its
 * resident size from /proc/PID/status.
 */

const KEY = TYPESENSE_API_KEY;
const MiB = 1024 * 1024;
const started: ChildProcess[] = [];

after(() => {
  for (const child of started) child.kill('SIGKILL');
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Resident size of a process in MiB (VmRSS). */
function rssMiB(pid: number): number {
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(kb![1]) / 1024;
}

/** The real stand-in on a free port, with the arguments `args` gives for that port (default: no caps named). */
async function startStandin(
  args = (port: number) => ['--port', String(port), '--api-key', KEY],
): Promise<{ port: number; pid: number }> {
  const port = await freePort();
  let output = '';
  const child = spawn('python3', ['-m', 'tbt_thinkingbox.typesense_standin', ...args(port)], {
    cwd: path.join(repoRoot, 'thinkingbox'),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) break;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/health`);
      if (res.ok) return { port, pid: child.pid! };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the stand-in did not start: ${output}`);
}

/** One request; the body is written chunk by chunk (so the test never holds a 200 MiB string). */
function request(
  port: number,
  method: string,
  urlPath: string,
  body?: { chunks: Iterable<Buffer>; length: number },
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: urlPath,
        headers: {
          'X-TYPESENSE-API-KEY': KEY,
          'Content-Type': 'application/json',
          'Content-Length': String(body?.length ?? 0),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (!body) return req.end();
    const chunks = body.chunks[Symbol.iterator]();
    const pump = () => {
      for (let next = chunks.next(); !next.done; next = chunks.next()) if (!req.write(next.value)) return;
      req.end();
    };
    req.on('drain', pump);
    pump();
  });
}

const json = (port: number, method: string, urlPath: string, value?: unknown) => {
  const data = value === undefined ? undefined : Buffer.from(JSON.stringify(value));
  return request(port, method, urlPath, data ? { chunks: [data], length: data.length } : undefined);
};

/** A JSON-lines import body of `count` documents of about `docBytes` each (no ids: each one is new). */
function importBody(count: number, docBytes: number, tag = 'doc'): { chunks: Buffer[]; length: number } {
  const words = `${tag} refund policy window `.repeat(Math.ceil(docBytes / 24)).slice(0, docBytes);
  const line = Buffer.from(`${JSON.stringify({ source: tag, text: words })}\n`);
  return { chunks: Array.from({ length: count }, () => line), length: line.length * count };
}

test('third review, finding 12: a 200 MiB import is refused at the body cap and the stand-in stays small', async () => {
  const standin = await startStandin();
  assert.equal((await json(standin.port, 'POST', '/collections', { name: 'kb', fields: [] })).status, 201);
  const before = rssMiB(standin.pid);
  // 200 MiB of 1 KiB documents, written as one import, like the review's.
  const line = Buffer.from(`${JSON.stringify({ source: 'flood', text: 'flood word '.repeat(93) })}\n`);
  const perChunk = Math.floor(MiB / line.length);
  const chunk = Buffer.concat(Array.from({ length: perChunk }, () => line));
  const chunks = Array.from({ length: Math.ceil((200 * MiB) / chunk.length) }, () => chunk);
  const length = chunks.length * chunk.length;
  const res = await request(standin.port, 'POST', '/collections/kb/documents/import', { chunks, length });
  const afterImport = rssMiB(standin.pid);
  console.log(
    `# 200 MiB import: HTTP ${res.status}; stand-in resident ${before.toFixed(1)} MiB before, ` +
      `${afterImport.toFixed(1)} MiB after`,
  );
  assert.equal(res.status, 413, `the import was not refused: HTTP ${res.status} ${res.text.slice(0, 200)}`);
  assert.match(
    res.text,
    /request body of \d+ bytes is over the stand-in's cap of 8 MiB .*--max-body-mb, TBT_TYPESENSE_MAX_BODY_MB/,
  );
  assert.ok(afterImport - before < 48, `resident ${before.toFixed(1)} -> ${afterImport.toFixed(1)} MiB`);
  const kb = JSON.parse((await json(standin.port, 'GET', '/collections/kb')).text) as { num_documents: number };
  assert.equal(kb.num_documents, 0, 'nothing of the refused import was stored');
  // The stand-in still serves: a small import on a new connection works.
  const small = await request(standin.port, 'POST', '/collections/kb/documents/import', importBody(3, 200));
  assert.equal(small.status, 200, small.text);
  assert.equal(small.text.split('\n').filter((l) => l.includes('"success": true')).length, 3);
});

test('third review, finding 12: documents per import and collection, bytes, collections, total: capped', async () => {
  // The caps come from the environment through the arguments `tbt up` starts the stand-in with.
  const { typesenseStandinArgs } = await import('../../infra/typesense-standin.ts');
  const env = readEnvironment({
    TBT_TYPESENSE_MAX_BODY_MB: '1',
    TBT_TYPESENSE_MAX_IMPORT_DOCUMENTS: '100',
    TBT_TYPESENSE_MAX_COLLECTION_DOCUMENTS: '250',
    TBT_TYPESENSE_MAX_COLLECTION_MB: '2',
    TBT_TYPESENSE_MAX_COLLECTIONS: '3',
    TBT_TYPESENSE_MAX_TOTAL_MB: '5',
  });
  const standin = await startStandin((port) => typesenseStandinArgs(env, port));
  const p = standin.port;
  const before = rssMiB(standin.pid);
  const create = (name: string) => json(p, 'POST', '/collections', { name, fields: [] });
  const lines = (text: string) => text.split('\n').map((l) => JSON.parse(l) as { success: boolean; error?: string });

  // Documents per import: the whole import is refused, nothing stored.
  assert.equal((await create('a')).status, 201);
  const tooMany = await request(p, 'POST', '/collections/a/documents/import', importBody(101, 10));
  assert.equal(tooMany.status, 413, tooMany.text);
  assert.match(
    tooMany.text,
    /holds 101 documents, over the stand-in.s cap of 100 per import .*TBT_TYPESENSE_MAX_IMPORT_DOCUMENTS/,
  );

  // Documents per collection: the import stops at the cap, line by line; a single document too.
  for (const n of [100, 100]) {
    const ok = await request(p, 'POST', '/collections/a/documents/import', importBody(n, 10));
    assert.ok(
      lines(ok.text).every((l) => l.success),
      ok.text.slice(0, 200),
    );
  }
  const third = lines((await request(p, 'POST', '/collections/a/documents/import', importBody(100, 10))).text);
  assert.equal(third.filter((l) => l.success).length, 50);
  assert.match(third.at(-1)!.error!, /cap of 250 documents per collection .*TBT_TYPESENSE_MAX_COLLECTION_DOCUMENTS/);
  const one = await json(p, 'POST', '/collections/a/documents', { text: 'one more' });
  assert.equal(one.status, 413, one.text);

  // Bytes per collection: 100 KiB documents, 8 per import (under the 1 MiB body cap), until the 2 MiB cap. A
  // document counts its JSON and its indexed text, about 200 KiB each here.
  assert.equal((await create('b')).status, 201);
  const stored: boolean[] = [];
  for (let i = 0; i < 5; i++)
    stored.push(
      ...lines((await request(p, 'POST', '/collections/b/documents/import', importBody(8, 100 * 1024, 'b'))).text).map(
        (l) => l.success,
      ),
    );
  const kept = stored.filter(Boolean).length;
  assert.ok(kept >= 8 && kept <= 10, `${kept} documents of 100 KiB kept under a 2 MiB cap`);
  const overBytes = await json(p, 'POST', '/collections/b/documents', { text: 'x'.repeat(200 * 1024) });
  assert.equal(overBytes.status, 413, overBytes.text);
  assert.match(overBytes.text, /cap of 2 MiB per collection .*--max-collection-mb, TBT_TYPESENSE_MAX_COLLECTION_MB/);

  // Collections: a fourth is refused until one is dropped.
  assert.equal((await create('c')).status, 201);
  const fourth = await create('d');
  assert.equal(fourth.status, 422, fourth.text);
  assert.match(fourth.text, /3 collections, the stand-in's cap .*--max-collections, TBT_TYPESENSE_MAX_COLLECTIONS/);
  assert.equal((await json(p, 'DELETE', '/collections/a')).status, 200);
  assert.equal((await create('d')).status, 201);

  // The total over all collections: b holds about 2 MiB, c fills to 2 MiB, d reaches the 5 MiB total.
  for (const name of ['c', 'd'])
    for (let i = 0; i < 4; i++)
      await request(p, 'POST', `/collections/${name}/documents/import`, importBody(8, 100 * 1024));
  const total = await json(p, 'POST', '/collections/d/documents', { text: 'y'.repeat(100 * 1024) });
  assert.equal(total.status, 413, total.text);
  assert.match(total.text, /cap of 5 MiB in all collections .*--max-total-mb, TBT_TYPESENSE_MAX_TOTAL_MB/);

  // A body over the (1 MiB) cap, and search answers held to Typesense's own limits.
  const big = await request(p, 'POST', '/collections/b/documents/import', importBody(12, 100 * 1024));
  assert.equal(big.status, 413, big.text);
  const perPage = await json(p, 'GET', '/collections/b/documents/search?q=refund&query_by=text&per_page=251');
  assert.equal(perPage.status, 422, perPage.text);
  const searches = Array.from({ length: 51 }, () => ({ collection: 'b', q: 'refund', query_by: 'text' }));
  const multi = await json(p, 'POST', '/multi_search', { searches });
  assert.equal(multi.status, 422, multi.text);
  const fine = await json(p, 'GET', '/collections/b/documents/search?q=refund&query_by=text&per_page=5');
  assert.equal(JSON.parse(fine.text).hits.length, 5);

  const afterAll = rssMiB(standin.pid);
  console.log(`# capped stand-in (5 MiB total): resident ${before.toFixed(1)} -> ${afterAll.toFixed(1)} MiB`);
  assert.ok(afterAll - before < 64, `resident ${before.toFixed(1)} -> ${afterAll.toFixed(1)} MiB`);
});

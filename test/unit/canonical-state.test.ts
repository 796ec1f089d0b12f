import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import {
  canonicalizeState,
  diffStates,
  formatDiff,
  stateHash,
  type StateSnapshot,
} from '../../core/canonical-state.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import { repoRoot } from '../../config/environment.ts';

const snapshot = (rows: Record<string, unknown>[]): StateSnapshot => ({
  orders: { primaryKey: ['id'], rows },
  items: {
    primaryKey: ['order_id', 'line'],
    rows: [
      { order_id: 1, line: 2, sku: 'b' },
      { order_id: 1, line: 1, sku: 'a' },
    ],
  },
});

test('canonical JSON sorts keys at every depth', () => {
  assert.equal(
    canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } }),
    '{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}',
  );
});

test('row order, key order and volatile columns do not change the hash', () => {
  const a = canonicalizeState(
    snapshot([
      { id: 1, status: 'open', updated_at: new Date(1) },
      { id: 2, status: 'paid', updated_at: new Date(2) },
    ]),
    { orders: ['updated_at'] },
  );
  const b = canonicalizeState(
    snapshot([
      { updated_at: new Date(99), status: 'paid', id: 2 },
      { status: 'open', id: 1, updated_at: new Date(7) },
    ]),
    { orders: ['updated_at'] },
  );
  assert.equal(stateHash(a), stateHash(b));
  assert.deepEqual(Object.keys(a.items!).sort(), ['order_id=1,line=1', 'order_id=1,line=2']);
});

test('a changed, missing or extra row changes the hash and is explained by the diff', () => {
  const golden = canonicalizeState(
    snapshot([
      { id: 1, status: 'cancelled' },
      { id: 2, status: 'paid' },
    ]),
  );
  const result = canonicalizeState(
    snapshot([
      { id: 1, status: 'open' },
      { id: 3, status: 'paid' },
    ]),
  );
  assert.notEqual(stateHash(golden), stateHash(result));
  assert.deepEqual(diffStates(result, golden), [
    { path: 'orders[id=1].status', result: 'open', golden: 'cancelled' },
    { path: 'orders[id=2]', result: null, golden: { id: 2, status: 'paid' } },
    { path: 'orders[id=3]', result: { id: 3, status: 'paid' }, golden: null },
  ]);
  assert.match(formatDiff(diffStates(result, golden)), /orders\[id=1\]\.status: "open" \(expected "cancelled"\)/);
});

test('lists of primitives compare as sets; a volatile column that differs is ignored but others are not', () => {
  const a = canonicalizeState(
    { t: { primaryKey: ['id'], rows: [{ id: 1, tags: ['b', 'a'], note: 'x' }] } },
    { t: ['note'] },
  );
  const b = canonicalizeState(
    { t: { primaryKey: ['id'], rows: [{ id: 1, tags: ['a', 'b'], note: 'y' }] } },
    { t: ['note'] },
  );
  assert.equal(stateHash(a), stateHash(b));
  const c = canonicalizeState(
    { t: { primaryKey: ['id'], rows: [{ id: 1, tags: ['a', 'c'], note: 'y' }] } },
    { t: ['note'] },
  );
  assert.notEqual(stateHash(a), stateHash(c));
});

test('finding 12: the state hash is the same under every process locale (sv_SE, en_US, C)', () => {
  // Swedish collation puts ä after z and ignores case first; code-unit order is locale-free.
  const script = `
    import { canonicalizeState, stateHash } from './core/canonical-state.ts';
    const state = canonicalizeState({ t: { primaryKey: ['id'], rows: [{ id: 1, tags: ['z', 'ä', 'a', 'B'] }] } });
    const locale = Intl.Collator().resolvedOptions().locale;
    console.log(JSON.stringify({ locale, hash: stateHash(state), tags: state.t['id=1'].tags }));`;
  const runs = ['sv_SE.UTF-8', 'en_US.UTF-8', 'C.UTF-8'].map((locale) => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: repoRoot,
      env: { ...process.env, LANG: locale, LC_ALL: locale },
      encoding: 'utf8',
    });
    return JSON.parse(out) as { locale: string; hash: string; tags: string[] };
  });
  assert.equal(runs[0]!.locale, 'sv-SE', 'the child really runs under the Swedish collation');
  assert.deepEqual(runs[0]!.tags, ['B', 'a', 'z', 'ä']);
  for (const run of runs) assert.equal(run.hash, runs[0]!.hash, `hash under ${run.locale}`);
});

import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json.ts';

/**
 * Terminal database state in canonical form: per table, rows keyed by primary key (`id=3` or
 * `order_id=3,line=1`), volatile columns dropped, lists of primitives sorted. Equal states hash equally;
 * `diffStates` explains an inequality as `table[key].column: result vs golden` entries.
 */

export interface TableSnapshot {
  primaryKey: string[];
  rows: Record<string, unknown>[];
}
export type StateSnapshot = Record<string, TableSnapshot>;
export type CanonicalState = Record<string, Record<string, Record<string, unknown>>>;

export interface StateDifference {
  path: string;
  result: unknown;
  golden: unknown;
}

/** Code-unit order: unlike `localeCompare`, the same under every process locale (hashes are shared). */
export function compareCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function normalise(value: unknown): unknown {
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  if (Array.isArray(value)) {
    const items = value.map(normalise);
    const primitive = items.every((v) => v === null || typeof v !== 'object');
    if (!primitive) return items;
    return items
      .map((v) => ({ v, key: canonicalJson(v) }))
      .sort((a, b) => compareCodeUnits(a.key, b.key))
      .map(({ v }) => v);
  }
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalise(v)]));
  }
  return value;
}

export function rowKey(primaryKey: string[], row: Record<string, unknown>): string {
  return primaryKey.map((c) => `${c}=${canonicalJson(normalise(row[c]))}`).join(',');
}

export function canonicalizeState(snapshot: StateSnapshot, volatile: Record<string, string[]> = {}): CanonicalState {
  const state: CanonicalState = {};
  for (const table of Object.keys(snapshot).sort()) {
    const { primaryKey, rows } = snapshot[table]!;
    const skip = new Set(volatile[table] ?? []);
    const byKey: Record<string, Record<string, unknown>> = {};
    for (const row of rows) {
      const kept: Record<string, unknown> = {};
      for (const [column, value] of Object.entries(row)) if (!skip.has(column)) kept[column] = normalise(value);
      byKey[rowKey(primaryKey, row)] = kept;
    }
    state[table] = byKey;
  }
  return state;
}

export function stateHash(state: CanonicalState): string {
  return createHash('sha256').update(canonicalJson(state)).digest('hex');
}

export function diffStates(result: CanonicalState, golden: CanonicalState): StateDifference[] {
  const diffs: StateDifference[] = [];
  const tables = [...new Set([...Object.keys(result), ...Object.keys(golden)])].sort();
  for (const table of tables) {
    const r = result[table] ?? {};
    const g = golden[table] ?? {};
    const keys = [...new Set([...Object.keys(r), ...Object.keys(g)])].sort();
    for (const key of keys) {
      const rr = r[key];
      const gr = g[key];
      if (rr === undefined || gr === undefined) {
        diffs.push({ path: `${table}[${key}]`, result: rr ?? null, golden: gr ?? null });
        continue;
      }
      for (const column of [...new Set([...Object.keys(rr), ...Object.keys(gr)])].sort()) {
        if (canonicalJson(rr[column] ?? null) !== canonicalJson(gr[column] ?? null)) {
          diffs.push({ path: `${table}[${key}].${column}`, result: rr[column] ?? null, golden: gr[column] ?? null });
        }
      }
    }
  }
  return diffs;
}

export function formatDiff(diffs: StateDifference[], limit = 20): string {
  const lines = diffs
    .slice(0, limit)
    .map((d) => `  ${d.path}: ${canonicalJson(d.result)} (expected ${canonicalJson(d.golden)})`);
  if (diffs.length > limit) lines.push(`  ... and ${diffs.length - limit} more`);
  return lines.join('\n');
}

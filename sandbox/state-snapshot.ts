import type pg from 'pg';
import type { StateSnapshot } from '../core/canonical-state.ts';
import { quoteIdent } from '../infra/control-database.ts';

/** Reads every table of a sandbox's public schema, rows ordered by primary key (through the read-only role). */
export async function readSnapshot(db: pg.ClientBase): Promise<StateSnapshot> {
  const { rows: tables } = await db.query<{ table_name: string; pk: string[] }>(`
    SELECT c.relname AS table_name,
           array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)) AS pk
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
    WHERE n.nspname = 'public' AND c.relkind = 'r'
    GROUP BY c.relname ORDER BY c.relname`);
  const snapshot: StateSnapshot = {};
  for (const { table_name, pk } of tables) {
    const order = pk.map(quoteIdent).join(', ');
    const { rows } = await db.query(`SELECT * FROM ${quoteIdent(table_name)} ORDER BY ${order}`);
    snapshot[table_name] = { primaryKey: pk, rows };
  }
  return snapshot;
}

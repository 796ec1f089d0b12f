import { createHash, randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Scenario } from '../config/task-schema.ts';
import { canonicalizeState, stateHash } from '../core/canonical-state.ts';
import { quoteIdent, withClient, withDatabase } from '../infra/control-database.ts';
import { readSnapshot } from './state-snapshot.ts';

/**
 * Sandbox recycling: a used sandbox goes back to its pool after a verified reset, instead of DROP DATABASE
 * plus CREATE DATABASE (which, once the warm pool drained, bound the sustained episode rate). The reset runs
 * in one transaction: every table truncated (identities restarted, every sequence restarted), then the
 * scenario's seed run again, which is how the template got its rows. The sandbox returns to the pool only if
 * its state fingerprint then equals the template's: every table's rows (the canonical state hash graders
 * use), every sequence's position, the catalog (relations, columns and types, triggers, functions) and no
 * large objects. Anything the reset cannot undo (a data patch's DDL, say) shows as a different fingerprint,
 * and the caller drops the sandbox. The template's fingerprint is read once per process from a throwaway
 * clone (a template accepts no connections).
 */

/** Fingerprint of a database's state: rows, sequence positions, catalog, large objects. */
export async function sandboxStateFingerprint(db: pg.ClientBase): Promise<string> {
  const rows = stateHash(canonicalizeState(await readSnapshot(db)));
  const { rows: names } = await db.query<{ name: string }>(
    `SELECT s.relname AS name FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace
     WHERE s.relkind = 'S' AND n.nspname = 'public' ORDER BY 1`,
  );
  const sequences: unknown[] = [];
  for (const { name } of names)
    sequences.push([name, (await db.query(`SELECT last_value, is_called FROM ${quoteIdent(name)}`)).rows[0]]);
  const catalog = await db.query(
    `SELECT n.nspname, c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod) AS type
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
       AND n.nspname NOT LIKE 'pg_temp%'
     ORDER BY 1, 2, 4`,
  );
  const extras = await db.query(
    `SELECT (SELECT count(*) FROM pg_largeobject_metadata)::int AS large_objects,
            (SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal) AS triggers,
            (SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p JOIN pg_namespace n
               ON n.oid = p.pronamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
               AND n.nspname NOT LIKE 'pg_temp%') AS functions`,
  );
  return createHash('sha256')
    .update(JSON.stringify([rows, sequences, catalog.rows, extras.rows]))
    .digest('hex');
}

const maxMismatchesInARow = 5;

export interface SandboxRecyclerOptions {
  controlUrl: string;
  /** Admin connections of the pool (control database). */
  admin: pg.Pool;
  strategy: string;
  /** Connection string of the sandbox's non-superuser owner role: the reset and the seed run as it. */
  ownerUrl: (sandbox: string) => Promise<string>;
  /** Name prefix of this deployment's sandboxes, so a scratch clone left by a crash is swept. */
  scratchPrefix: () => Promise<string>;
}

export class SandboxRecycler {
  private readonly scenarios = new Map<string, Scenario>();
  private readonly templateFingerprints = new Map<string, Promise<string>>();
  /** Verification failures in a row per template; a seed that is not reproducible (now(), random()) stops recycling. */
  private readonly mismatches = new Map<string, number>();

  constructor(private readonly options: SandboxRecyclerOptions) {}

  /** The pool tells the recycler which scenario built each template (the reset reruns its seed). */
  remember(template: string, scenario: Scenario): void {
    this.scenarios.set(template, scenario);
  }

  templateFingerprint(template: string): Promise<string> {
    let pending = this.templateFingerprints.get(template);
    if (!pending) {
      pending = this.readTemplateFingerprint(template);
      this.templateFingerprints.set(template, pending);
      pending.catch(() => this.templateFingerprints.delete(template));
    }
    return pending;
  }

  private async readTemplateFingerprint(template: string): Promise<string> {
    const name = `${await this.options.scratchPrefix()}fp_${randomBytes(6).toString('hex')}`;
    // Registered like any sandbox, so a crash here leaves something the pool's sweeper drops.
    await this.options.admin.query(
      `INSERT INTO sandboxes (name, template, state, owner, leased_at, expires_at)
       VALUES ($1, $2, 'leased', 'recycler:fingerprint', now(), now() + interval '10 minutes')`,
      [name, template],
    );
    try {
      await this.options.admin.query(
        `CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)} STRATEGY ${this.options.strategy}`,
      );
      return await withClient(withDatabase(this.options.controlUrl, name), sandboxStateFingerprint);
    } finally {
      await this.options.admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
      await this.options.admin.query(`DELETE FROM sandboxes WHERE name = $1`, [name]);
    }
  }

  /**
   * Resets a leased sandbox to its template's state and verifies it; true = it is back in the pool as ready.
   * False (nothing known about its template, the reset failed, or the fingerprint differs): the caller drops it.
   */
  async recycle(name: string): Promise<boolean> {
    try {
      const { rows } = await this.options.admin.query<{ template: string }>(
        `SELECT template FROM sandboxes WHERE name = $1 AND state = 'leased'`,
        [name],
      );
      const template = rows[0]?.template;
      const scenario = template === undefined ? undefined : this.scenarios.get(template);
      if (template === undefined || scenario === undefined) return false;
      if ((this.mismatches.get(template) ?? 0) >= maxMismatchesInARow) return false;
      const expected = await this.templateFingerprint(template);
      // Sessions the episode left (tool handlers, checks) must not see or block the reset.
      await this.options.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
        [name],
      );
      await withClient(await this.options.ownerUrl(name), (db) => resetToSeed(db, scenario));
      const actual = await withClient(withDatabase(this.options.controlUrl, name), sandboxStateFingerprint);
      if (actual !== expected) {
        this.mismatches.set(template, (this.mismatches.get(template) ?? 0) + 1);
        return false;
      }
      this.mismatches.delete(template);
      const back = await this.options.admin.query(
        `UPDATE sandboxes SET state = 'ready', owner = NULL, leased_at = NULL, expires_at = now() + interval '24 hours'
         WHERE name = $1 AND state = 'leased'`,
        [name],
      );
      return back.rowCount === 1;
    } catch {
      return false;
    }
  }
}

/** Truncates every table and restarts every sequence, then reruns the seed: one transaction, all or nothing. */
export async function resetToSeed(db: pg.ClientBase, scenario: Pick<Scenario, 'seed'>): Promise<void> {
  const { rows: tables } = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1`,
  );
  const { rows: sequences } = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind = 'S' ORDER BY 1`,
  );
  await db.query('BEGIN');
  try {
    if (tables.length)
      await db.query(`TRUNCATE ${tables.map((t) => quoteIdent(t.name)).join(', ')} RESTART IDENTITY CASCADE`);
    for (const s of sequences) await db.query(`ALTER SEQUENCE ${quoteIdent(s.name)} RESTART`);
    if (scenario.seed.trim()) await db.query(scenario.seed);
    await db.query('COMMIT');
  } catch (err) {
    await db.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Scenario } from '../config/task-schema.ts';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { SandboxRecycler } from './sandbox-recycler.ts';
import { agentRole, quoteIdent, readerRole, withClient, withDatabase, withRole } from '../infra/control-database.ts';

/**
 * Fresh Postgres databases for episodes. Each scenario has a template database (schema + seed + grants);
 * an episode leases a clone of it. A warm pool of ready clones keeps `CREATE DATABASE` off the critical
 * path. Every sandbox row carries a lease expiry, so `sweep()` can drop what crashed workers left behind.
 */

export interface Sandbox {
  name: string;
  scenario: string;
  /** Tool handlers connect with this: role tbt_agent, this database only. */
  agentUrl: string;
  /** Checks connect with this: role tbt_reader, read-only sessions. */
  readerUrl: string;
  /** Admin access, for data patches and tests. */
  adminUrl: string;
}

export interface SandboxPoolOptions {
  /** Admin URL of the control database (CREATEDB, CREATEROLE). */
  controlUrl: string;
  agentPassword?: string;
  readerPassword?: string;
  /** Ready clones kept per template. */
  warm?: number;
  /** Lease length; a leased sandbox older than this is swept. */
  leaseMs?: number;
  /** Clone strategy. WAL_LOG measured about 5x faster than FILE_COPY here (FILE_COPY forces a checkpoint); see bench/sandbox. */
  strategy?: 'FILE_COPY' | 'WAL_LOG';
  /**
   * Release resets a used sandbox and returns it to the pool (sandbox-recycler.ts) instead of dropping it;
   * false = clone per episode (DROP + CREATE). A failed or unverified reset drops it.
   */
  recycle?: boolean;
}

const GRANTS_VERSION = 1;
const SANDBOX_PREFIX = 'tbt_sbx_';

export function templateFingerprint(scenario: Scenario): string {
  return createHash('sha256')
    .update(JSON.stringify([GRANTS_VERSION, scenario.schema, scenario.seed]))
    .digest('hex')
    .slice(0, 12);
}

export function templateName(scenario: Scenario): string {
  return `tbt_tpl_${scenario.name.slice(0, 30)}_${templateFingerprint(scenario)}`;
}

function isConnectionError(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === undefined || code.startsWith('08') || code.startsWith('57') || code.startsWith('53');
}

export class SandboxPool {
  private readonly warm: number;
  private readonly leaseMs: number;
  private readonly strategy: string;
  private readonly templates = new Map<string, Promise<string>>();
  private readonly refills = new Map<string, Promise<void>>();
  private readonly admin: pg.Pool;
  private readonly recycler?: SandboxRecycler;
  private closed = false;

  constructor(private readonly options: SandboxPoolOptions) {
    this.warm = options.warm ?? 2;
    this.leaseMs = options.leaseMs ?? 30 * 60_000;
    this.strategy = options.strategy ?? 'WAL_LOG';
    this.admin = new pg.Pool({ connectionString: options.controlUrl, max: 4, connectionTimeoutMillis: 10_000 });
    this.admin.on('error', () => undefined);
    if (options.recycle)
      this.recycler = new SandboxRecycler({
        controlUrl: options.controlUrl,
        admin: this.admin,
        strategy: this.strategy,
      });
  }

  private sandbox(name: string, scenario: string): Sandbox {
    const admin = withDatabase(this.options.controlUrl, name);
    return {
      name,
      scenario,
      adminUrl: admin,
      agentUrl: withRole(admin, agentRole, this.options.agentPassword),
      readerUrl: withRole(admin, readerRole, this.options.readerPassword),
    };
  }

  /** Builds the scenario's template database once (per fingerprint); concurrent callers wait for it. */
  ensureTemplate(scenario: Scenario): Promise<string> {
    const name = templateName(scenario);
    this.recycler?.remember(name, scenario);
    let pending = this.templates.get(name);
    if (!pending) {
      pending = this.buildTemplate(scenario, name);
      this.templates.set(name, pending);
      pending.catch(() => this.templates.delete(name));
    }
    return pending;
  }

  private async buildTemplate(scenario: Scenario, name: string): Promise<string> {
    const client = await this.admin.connect();
    const lock = Number.parseInt(templateFingerprint(scenario).slice(0, 8), 16);
    try {
      await client.query('SELECT pg_advisory_lock($1)', [lock]);
      const known = await client.query(
        'SELECT 1 FROM sandbox_templates t JOIN pg_database d ON d.datname = t.name WHERE t.name = $1',
        [name],
      );
      if (known.rowCount) return name;
      await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)}`);
      await client.query(`CREATE DATABASE ${quoteIdent(name)}`);
      try {
        await withClient(withDatabase(this.options.controlUrl, name), async (c) => {
          await c.query(scenario.schema);
          if (scenario.seed.trim()) await c.query(scenario.seed);
          const noKey = await c.query<{ table_name: string }>(`
            SELECT c.relname AS table_name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r'
              AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)`);
          if (noKey.rowCount)
            throw new Error(
              `table ${noKey.rows.map((r) => r.table_name).join(', ')} has no primary key (state is compared row by row by key)`,
            );
          await c.query(`
            REVOKE ALL ON SCHEMA public FROM PUBLIC;
            GRANT USAGE ON SCHEMA public TO ${agentRole}, ${readerRole};
            GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${agentRole};
            GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ${agentRole};
            GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${readerRole};
            GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO ${readerRole};`);
        });
      } catch (err) {
        await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)}`);
        throw new Error(`scenario ${scenario.name}: schema or seed failed: ${errorMessage(err)}`, { cause: err });
      }
      // No connections to a template: CREATE DATABASE ... TEMPLATE requires it.
      await client.query(`ALTER DATABASE ${quoteIdent(name)} WITH ALLOW_CONNECTIONS false IS_TEMPLATE true`);
      await client.query(
        `INSERT INTO sandbox_templates (name, scenario, fingerprint) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
        [name, scenario.name, templateFingerprint(scenario)],
      );
      return name;
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [lock]).catch(() => undefined);
      client.release();
    }
  }

  private async clone(template: string, state: 'ready' | 'leased', owner: string | null): Promise<string> {
    const name = `${SANDBOX_PREFIX}${randomBytes(6).toString('hex')}`;
    const expiresMs = state === 'ready' ? 24 * 3600_000 : this.leaseMs;
    // The row exists before the database, so a crash in between leaves something the sweeper can find.
    await this.admin.query(
      `INSERT INTO sandboxes (name, template, state, owner, leased_at, expires_at) VALUES ($1, $2, 'creating', $3, now(), now() + make_interval(secs => $4))`,
      [name, template, owner, expiresMs / 1000],
    );
    await this.admin.query(
      `CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)} STRATEGY ${this.strategy}`,
    );
    await this.admin.query(`UPDATE sandboxes SET state = $2 WHERE name = $1`, [name, state]);
    return name;
  }

  /** Leases a fresh sandbox for `scenario`: a warm one if ready, else a cold clone. Refills in the background. */
  async acquire(scenario: Scenario, owner: string, options: { dataPatch?: string } = {}): Promise<Sandbox> {
    if (this.closed) throw new InfrastructureError('sandbox pool is closed');
    try {
      const template = await this.ensureTemplate(scenario);
      const leased = await this.admin.query<{ name: string }>(
        `UPDATE sandboxes SET state = 'leased', owner = $2, leased_at = now(), expires_at = now() + make_interval(secs => $3)
         WHERE name = (SELECT name FROM sandboxes WHERE template = $1 AND state = 'ready' ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING name`,
        [template, owner, this.leaseMs / 1000],
      );
      const name = leased.rows[0]?.name ?? (await this.clone(template, 'leased', owner));
      void this.refill(template); // never rejects: a failed refill only costs latency
      const sandbox = this.sandbox(name, scenario.name);
      if (options.dataPatch?.trim()) {
        try {
          await withClient(sandbox.adminUrl, (c) => c.query(options.dataPatch!));
        } catch (err) {
          await this.release(sandbox);
          if (isConnectionError(err)) throw err;
          throw new Error(`data patch failed: ${errorMessage(err)}`, { cause: err });
        }
      }
      return sandbox;
    } catch (err) {
      if (err instanceof Error && !(err instanceof InfrastructureError) && isConnectionError(err)) {
        throw new InfrastructureError(`sandbox acquire failed: ${err.message}`, { cause: err });
      }
      throw err;
    }
  }

  /** Tops the template's ready clones up to `warm`, at most one refill at a time per template. */
  refill(template: string): Promise<void> {
    if (this.warm === 0 || this.closed) return Promise.resolve();
    const running = this.refills.get(template);
    if (running) return running;
    const task = (async () => {
      try {
        for (;;) {
          if (this.closed) return;
          const { rows } = await this.admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM sandboxes WHERE template = $1 AND state IN ('ready', 'creating') AND owner IS NULL`,
            [template],
          );
          if (Number(rows[0]!.n) >= this.warm) return;
          await this.clone(template, 'ready', null);
        }
      } catch {
        // A failed refill only costs latency: the next acquire clones cold and refills again.
      } finally {
        this.refills.delete(template);
      }
    })();
    this.refills.set(template, task);
    return task;
  }

  /** Gives a used sandbox back: reset and returned to the pool when recycling, else dropped. */
  async release(sandbox: Pick<Sandbox, 'name'>): Promise<void> {
    if (this.recycler && !this.closed && (await this.recycler.recycle(sandbox.name))) return;
    await this.drop(sandbox);
  }

  /** Drops the sandbox's database (terminating its sessions) and forgets it. */
  async drop(sandbox: Pick<Sandbox, 'name'>): Promise<void> {
    await this.admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(sandbox.name)} WITH (FORCE)`);
    await this.admin.query(`DELETE FROM sandboxes WHERE name = $1`, [sandbox.name]);
  }

  /** Removes sandboxes whose lease expired (crashed workers) and databases nobody knows about. */
  async sweep(): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    const expired = await this.admin.query<{ name: string }>(`SELECT name FROM sandboxes WHERE expires_at < now()`);
    const orphans = await this.admin.query<{ name: string }>(
      `SELECT datname AS name FROM pg_database d WHERE datname LIKE '${SANDBOX_PREFIX}%' AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.name = d.datname)`,
    );
    for (const { name } of [...expired.rows, ...orphans.rows]) {
      await this.drop({ name });
      dropped.push(name);
    }
    await this.admin.query(
      `DELETE FROM sandboxes s WHERE state <> 'creating' AND NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.datname = s.name)`,
    );
    return { dropped };
  }

  /** Waits for background refills, then closes the admin connections. Ready clones stay for the next run. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.refills.values()]);
    await this.admin.end();
  }
}

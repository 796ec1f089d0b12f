import { createHash, createHmac, randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Scenario } from '../config/task-schema.ts';
import { InfrastructureError, errorMessage, isInfrastructureSqlState } from '../core/errors.ts';
import {
  deploymentRoles,
  quoteIdent,
  readDeploymentTag,
  rolePassword,
  withClient,
  withDatabase,
  withRole,
  type DeploymentRoles,
} from '../infra/control-database.ts';
import { metrics } from '../infra/metrics.ts';
import { SandboxRecycler } from './sandbox-recycler.ts';

/**
 * Fresh Postgres databases for episodes. Each scenario has a template database (schema + seed + grants);
 * an episode leases a clone of it. A warm pool of ready clones keeps `CREATE DATABASE` off the critical
 * path. Every sandbox row carries a lease expiry, renewed while this process holds the lease, so `sweep()`
 * can drop what crashed workers left behind.
 *
 * Several deployments (control databases) may share one Postgres server. Every database and role this pool
 * creates or grants to carries its deployment's tag in its name (`tbt_sbx_<tag>_...`, `tbt_tpl_<tag>_...`,
 * `tbt_owner_<tag>`, ...), and the sweeper only ever considers names with its own tag, matched as a plain prefix
 * (no LIKE wildcards).
 */

export interface Sandbox {
  name: string;
  scenario: string;
  /** Tool handlers connect with this: the sandbox's own login role (a member of the agent role), this database only. */
  agentUrl: string;
  /** Checks connect with this: the deployment's reader role, read-only sessions. */
  readerUrl: string;
  /** Owner of the scenario tables (no superuser rights): data patches run with this. */
  ownerUrl: string;
  /** Admin access, for tests and validation's deliberate mutations. */
  adminUrl: string;
}

export interface SandboxPoolOptions {
  /** Admin URL of the control database (CREATEDB, CREATEROLE). */
  controlUrl: string;
  agentPassword?: string;
  readerPassword?: string;
  /** Ready clones kept per template. */
  warm?: number;
  /** Lease length; renewed every third of it while this pool holds the sandbox, swept once it lapses. */
  leaseMs?: number;
  /** A database with this deployment's tag but no row is dropped only once it has been seen this long. */
  orphanMinAgeMs?: number;
  /**
   * Clone strategy. WAL_LOG measured about 5x faster than FILE_COPY here (FILE_COPY forces a checkpoint); see
   * bench/sandbox.
   */
  strategy?: 'FILE_COPY' | 'WAL_LOG';
  /**
   * Release resets a used sandbox and returns it to the pool (sandbox-recycler.ts) instead of dropping it;
   * false = clone per episode (DROP + CREATE). A failed or unverified reset drops it.
   */
  recycle?: boolean;
}

// 3: per-clone tool roles, no PUBLIC CONNECT/TEMP, tables owned by tbt_owner; 4: roles named after the deployment
const GRANTS_VERSION = 4;

export function templateFingerprint(scenario: Scenario): string {
  return createHash('sha256')
    .update(JSON.stringify([GRANTS_VERSION, scenario.schema, scenario.seed]))
    .digest('hex')
    .slice(0, 12);
}

/** Database name prefixes of one deployment (tag: `deployment.tag` in its control database). */
export function sandboxPrefix(tag: string): string {
  return `tbt_sbx_${tag}_`;
}
export function templatePrefix(tag: string): string {
  return `tbt_tpl_${tag}_`;
}
export function templateName(scenario: Scenario, tag: string): string {
  return `${templatePrefix(tag)}${scenario.name.slice(0, 30)}_${templateFingerprint(scenario)}`;
}

/** The advisory lock (control database) held while a template is built or dropped: key from its fingerprint. */
function templateLock(fingerprint: string): number {
  return Number.parseInt(fingerprint.slice(0, 8), 16);
}

/** SQLSTATEs of a clone whose template is gone: its database (3D000) or its row (23503, the foreign key). */
function isTemplateGone(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === '3D000' || code === '23503';
}

function isConnectionError(err: unknown): boolean {
  return isInfrastructureSqlState((err as { code?: string }).code);
}

export class SandboxPool {
  private readonly warm: number;
  private readonly leaseMs: number;
  private readonly orphanMinAgeMs: number;
  private readonly strategy: string;
  private readonly templates = new Map<string, Promise<string>>();
  private readonly refills = new Map<string, Promise<void>>();
  /** Lease renewals of the sandboxes this pool holds, by name. */
  private readonly renewals = new Map<string, NodeJS.Timeout>();
  private readonly admin: pg.Pool;
  private tagQuery: Promise<string> | undefined;
  private readonly recycler?: SandboxRecycler;
  private closed = false;

  constructor(private readonly options: SandboxPoolOptions) {
    this.warm = options.warm ?? 2;
    this.leaseMs = options.leaseMs ?? 30 * 60_000;
    this.orphanMinAgeMs = options.orphanMinAgeMs ?? 10 * 60_000;
    this.strategy = options.strategy ?? 'WAL_LOG';
    this.admin = new pg.Pool({ connectionString: options.controlUrl, max: 4, connectionTimeoutMillis: 10_000 });
    this.admin.on('error', () => undefined);
    if (options.recycle)
      this.recycler = new SandboxRecycler({
        controlUrl: options.controlUrl,
        admin: this.admin,
        strategy: this.strategy,
        // Task SQL (the seed the reset reruns) runs as the non-superuser owner; scratch clones carry our tag.
        ownerUrl: async (name) => (await this.sandbox(name, '')).ownerUrl,
        scratchPrefix: async () => sandboxPrefix(await this.deploymentTag()),
      });
  }

  /** This deployment's tag, read once from its control database. */
  deploymentTag(): Promise<string> {
    this.tagQuery ??= readDeploymentTag(this.admin);
    this.tagQuery.catch(() => (this.tagQuery = undefined));
    return this.tagQuery;
  }

  /** This deployment's restricted roles (ensureControlDatabase creates them). */
  async roles(): Promise<DeploymentRoles> {
    return deploymentRoles(await this.deploymentTag());
  }

  private async sandbox(name: string, scenario: string): Promise<Sandbox> {
    const admin = withDatabase(this.options.controlUrl, name);
    const url = this.options.controlUrl;
    const roles = await this.roles();
    return {
      name,
      scenario,
      adminUrl: admin,
      ownerUrl: withRole(admin, roles.owner, rolePassword(url, roles.owner, undefined)),
      agentUrl: withRole(admin, name, this.toolRolePassword(name, roles)),
      readerUrl: withRole(admin, roles.reader, rolePassword(url, roles.reader, this.options.readerPassword)),
    };
  }

  /** Builds the scenario's template database once (per fingerprint); concurrent callers wait for it. */
  async ensureTemplate(scenario: Scenario): Promise<string> {
    const name = templateName(scenario, await this.deploymentTag());
    this.recycler?.remember(name, scenario);
    let pending = this.templates.get(name);
    if (!pending) {
      pending = this.buildTemplate(scenario, name);
      this.templates.set(name, pending);
      pending.catch(() => this.templates.delete(name));
    }
    return pending;
  }

  /**
   * A clone's tool role's password, derived (HMAC) from the shared tool password, so any worker of this
   * deployment can open any of its sandboxes for an episode, while the credential of one opens no other.
   */
  private toolRolePassword(name: string, roles: DeploymentRoles): string | undefined {
    const key = rolePassword(this.options.controlUrl, roles.agent, this.options.agentPassword);
    return key === undefined ? undefined : createHmac('sha256', key).update(`sandbox tool role:${name}`).digest('hex');
  }

  /**
   * Only the given roles may connect; nobody gets TEMP (Postgres grants both to PUBLIC on every new database,
   * and a clone does not inherit its template's database privileges).
   */
  private async restrictDatabase(name: string, roles: string[]): Promise<void> {
    await this.admin.query(
      `REVOKE ALL ON DATABASE ${quoteIdent(name)} FROM PUBLIC;
       GRANT CONNECT ON DATABASE ${quoteIdent(name)} TO ${roles.map(quoteIdent).join(', ')}`,
    );
  }

  private async buildTemplate(scenario: Scenario, name: string): Promise<string> {
    const roles = await this.roles();
    const client = await this.admin.connect();
    const lock = templateLock(templateFingerprint(scenario));
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
        await this.restrictDatabase(name, [roles.owner]);
        // The owner role owns the public schema and so every scenario table; task files never run as admin.
        await withClient(withDatabase(this.options.controlUrl, name), (c) =>
          c.query(`ALTER SCHEMA public OWNER TO ${quoteIdent(roles.owner)}`),
        );
        await withClient((await this.sandbox(name, scenario.name)).ownerUrl, async (c) => {
          await c.query(scenario.schema);
          if (scenario.seed.trim()) await c.query(scenario.seed);
          const noKey = await c.query<{ table_name: string }>(`
            SELECT c.relname AS table_name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind = 'r'
              AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)`);
          if (noKey.rowCount)
            throw new Error(
              `table ${noKey.rows.map((r) => r.table_name).join(', ')} has no primary key (state is compared row by ` +
                `row by key)`,
            );
          const [agent, reader] = [quoteIdent(roles.agent), quoteIdent(roles.reader)];
          await c.query(`
            REVOKE ALL ON SCHEMA public FROM PUBLIC;
            GRANT USAGE ON SCHEMA public TO ${agent}, ${reader};
            GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${agent};
            GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ${agent};
            GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};
            GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO ${reader};`);
        });
      } catch (err) {
        await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)}`);
        throw new Error(`scenario ${scenario.name}: schema or seed failed: ${errorMessage(err)}`, { cause: err });
      }
      // No connections to a template: CREATE DATABASE ... TEMPLATE requires it.
      await client.query(`ALTER DATABASE ${quoteIdent(name)} WITH ALLOW_CONNECTIONS false IS_TEMPLATE true`);
      // A rebuild (its database was gone) counts as new: `pruneTemplates` goes by age.
      await client.query(
        `INSERT INTO sandbox_templates (name, scenario, fingerprint) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET created_at = now()`,
        [name, scenario.name, templateFingerprint(scenario)],
      );
      return name;
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [lock]).catch(() => undefined);
      client.release();
    }
  }

  private async clone(template: string, state: 'ready' | 'leased', owner: string | null): Promise<string> {
    const name = `${sandboxPrefix(await this.deploymentTag())}${randomBytes(6).toString('hex')}`;
    const roles = await this.roles();
    // The row exists before the database, so a crash in between leaves something the sweeper can find. While
    // 'creating' it holds a lease like a leased sandbox: a crashed worker's row lapses one lease after it (and
    // from then on no longer counts as warm), not 24 h after.
    await this.admin.query(
      `INSERT INTO sandboxes (name, template, state, owner, leased_at, expires_at) VALUES ($1, $2, 'creating', $3, ` +
        `now(), now() + make_interval(secs => $4))`,
      [name, template, owner, this.leaseMs / 1000],
    );
    try {
      await this.admin.query(
        `CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)} STRATEGY ${this.strategy}`,
      );
      // The clone's own tool role: the agent role's table privileges (membership), CONNECT on this database only.
      const password = this.toolRolePassword(name, roles);
      await this.admin.query(
        `CREATE ROLE ${quoteIdent(name)} LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE CONNECTION LIMIT 20
         ${password === undefined ? '' : `PASSWORD ${pg.escapeLiteral(password)}`} IN ROLE ${quoteIdent(roles.agent)}`,
      );
      await this.restrictDatabase(name, [name, roles.reader, roles.owner]);
      const expiresMs = state === 'ready' ? 24 * 3600_000 : this.leaseMs;
      const created = await this.admin.query(
        `UPDATE sandboxes SET state = $2, expires_at = now() + make_interval(secs => $3)
         WHERE name = $1 AND state = 'creating'`,
        [name, state, expiresMs / 1000],
      );
      // Swept meanwhile (its lease lapsed): a database without a row would be dropped as an orphan later.
      if (created.rowCount !== 1) throw new InfrastructureError(`sandbox ${name} lost its row while being created`);
    } catch (err) {
      // A failed clone leaves nothing behind: no database, no role, no 'creating' row counted as warm.
      await this.dropDatabase(name).catch(() => undefined);
      await this.admin.query(`DELETE FROM sandboxes WHERE name = $1`, [name]).catch(() => undefined);
      throw err;
    }
    return name;
  }

  /** A cold clone; a template dropped under this process (`tbt gc`, a restore) is built again, once. */
  private async cloneLeased(scenario: Scenario, template: string, owner: string): Promise<string> {
    try {
      return await this.clone(template, 'leased', owner);
    } catch (err) {
      if (!isTemplateGone(err)) throw err;
      this.templates.delete(template);
      return this.clone(await this.ensureTemplate(scenario), 'leased', owner);
    }
  }

  /** Leases a fresh sandbox for `scenario`: a warm one if ready, else a cold clone. Refills in the background. */
  async acquire(scenario: Scenario, owner: string, options: { dataPatch?: string } = {}): Promise<Sandbox> {
    if (this.closed) throw new InfrastructureError('sandbox pool is closed');
    try {
      const template = await this.ensureTemplate(scenario);
      const leased = await this.admin.query<{ name: string }>(
        `UPDATE sandboxes SET state = 'leased', owner = $2, leased_at = now(),
                              expires_at = now() + make_interval(secs => $3)
         WHERE name = (SELECT name FROM sandboxes WHERE template = $1 AND state = 'ready' AND expires_at > now()
                       ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING name`,
        [template, owner, this.leaseMs / 1000],
      );
      const warm = leased.rows[0]?.name;
      const name = warm ?? (await this.cloneLeased(scenario, template, owner));
      metrics.sandboxAcquired(warm ? 'warm' : 'cold');
      this.holdLease(name);
      void this.refill(template); // never rejects: a failed refill only costs latency
      const sandbox = await this.sandbox(name, scenario.name);
      if (options.dataPatch?.trim()) {
        try {
          await withClient(sandbox.ownerUrl, (c) => c.query(options.dataPatch!));
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
          // A lapsed row is no clone to count on: a crashed worker's 'creating' row, a ready one about to be swept.
          const { rows } = await this.admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM sandboxes WHERE template = $1 AND state IN ('ready', 'creating') AND owner IS ` +
              `NULL AND expires_at > now()`,
            [template],
          );
          metrics.sandboxWarmClones(template, Number(rows[0]!.n));
          if (Number(rows[0]!.n) >= this.warm) return;
          await this.clone(template, 'ready', null);
        }
      } catch (err) {
        // A failed refill only costs latency: the next acquire clones cold (building a vanished template again).
        if (isTemplateGone(err)) this.templates.delete(template);
      } finally {
        this.refills.delete(template);
      }
    })();
    this.refills.set(template, task);
    return task;
  }

  /**
   * Keeps a held sandbox's lease alive: renewed every third of the lease while this process runs, so an
   * episode may take as long as it needs, and a crashed worker's sandboxes still lapse one lease after it.
   */
  private holdLease(name: string): void {
    const timer = setInterval(() => {
      this.admin
        .query(`UPDATE sandboxes SET expires_at = now() + make_interval(secs => $2) WHERE name = $1`, [
          name,
          this.leaseMs / 1000,
        ])
        .catch(() => undefined); // a missed renewal is retried at the next tick; the lease has slack for two
    }, this.leaseMs / 3);
    timer.unref();
    this.renewals.set(name, timer);
    metrics.sandboxLeased(this.renewals.size);
  }

  private stopRenewing(name: string): void {
    clearInterval(this.renewals.get(name));
    this.renewals.delete(name);
    metrics.sandboxLeased(this.renewals.size);
  }

  /** Gives a used sandbox back: reset and returned to the pool when recycling, else dropped. */
  async release(sandbox: Pick<Sandbox, 'name'>): Promise<void> {
    this.stopRenewing(sandbox.name);
    if (this.recycler && !this.closed && (await this.recycler.recycle(sandbox.name))) return;
    await this.drop(sandbox);
  }

  /** Drops the sandbox's database (terminating its sessions) and forgets it. */
  async drop(sandbox: Pick<Sandbox, 'name'>): Promise<void> {
    this.stopRenewing(sandbox.name);
    await this.dropDatabase(sandbox.name);
    await this.admin.query(`DELETE FROM sandboxes WHERE name = $1`, [sandbox.name]);
  }

  /** Drops a sandbox's database and then its tool role (which holds privileges on nothing else). */
  private async dropDatabase(name: string): Promise<void> {
    await this.admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
    await this.admin.query(`DROP ROLE IF EXISTS ${quoteIdent(name)}`);
  }

  /**
   * Removes this deployment's sandboxes whose lease lapsed (crashed workers) and its databases no row knows
   * (orphans) once they have been seen for `orphanMinAgeMs`. Each expired row is claimed (deleted) under its
   * own condition right before its drop, so a lease renewed or taken since the listing is kept.
   */
  async sweep(): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    const prefix = sandboxPrefix(await this.deploymentTag());
    const expired = await this.admin.query<{ name: string }>(`SELECT name FROM sandboxes WHERE expires_at < now()`);
    for (const { name } of expired.rows) {
      if (this.renewals.has(name)) continue; // held here: the renewal is merely late
      const claimed = await this.admin.query(
        `DELETE FROM sandboxes WHERE name = $1 AND expires_at < now() RETURNING name`,
        [name],
      );
      if (!claimed.rowCount) continue;
      await this.dropDatabase(name);
      dropped.push(name);
    }
    // Orphans: own-tag databases without a row. Sightings are recorded so that only old ones are dropped.
    await this.admin.query(
      `INSERT INTO sandbox_orphans (name)
         SELECT datname FROM pg_database d
         WHERE starts_with(datname, $1) AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.name = d.datname)
       ON CONFLICT (name) DO NOTHING`,
      [prefix],
    );
    const orphans = await this.admin.query<{ name: string }>(
      `SELECT name FROM sandbox_orphans WHERE first_seen < now() - make_interval(secs => $1)`,
      [this.orphanMinAgeMs / 1000],
    );
    for (const { name } of orphans.rows) {
      const known = await this.admin.query('SELECT 1 FROM sandboxes WHERE name = $1', [name]);
      if (!known.rowCount && name.startsWith(prefix)) {
        await this.dropDatabase(name);
        dropped.push(name);
      }
      await this.admin.query('DELETE FROM sandbox_orphans WHERE name = $1', [name]);
    }
    await this.admin.query(
      `DELETE FROM sandbox_orphans o WHERE NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.datname = o.name)`,
    );
    // Tool roles whose sandbox is gone (a crash between the two drops); a live clone's row predates its role.
    const strayRoles = await this.admin.query<{ name: string }>(
      `SELECT rolname AS name FROM pg_roles r WHERE starts_with(rolname, $1)
         AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.name = r.rolname)
         AND NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.datname = r.rolname)`,
      [prefix],
    );
    for (const { name } of strayRoles.rows) await this.admin.query(`DROP ROLE IF EXISTS ${quoteIdent(name)}`);
    await this.admin.query(
      `DELETE FROM sandboxes s WHERE state <> 'creating' AND NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.datname ` +
        `= s.name)`,
    );
    return { dropped };
  }

  /**
   * Drops this deployment's template databases that nothing uses (`tbt gc`): no sandbox row names them, and a newer
   * template of the same scenario replaced them (the suite or the grants changed) or they are older than
   * `olderThanMs`; and own-tag template databases without a row (a build that died). Each is claimed under the
   * lock its build holds, with new clones held off, so a template being built or cloned is never dropped; a worker
   * that still knows a dropped name builds it again at its next acquire. Returns the names dropped (would be, with
   * `dryRun`).
   */
  async pruneTemplates(options: { olderThanMs: number; dryRun?: boolean }): Promise<string[]> {
    const { rows } = await this.admin.query<{ name: string }>(
      `SELECT t.name FROM sandbox_templates t
       WHERE starts_with(t.name, $1) AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.template = t.name)
         AND (t.created_at < now() - make_interval(secs => $2)
              OR EXISTS (SELECT 1 FROM sandbox_templates n
                         WHERE n.scenario = t.scenario AND n.created_at > t.created_at))
       UNION
       SELECT d.datname FROM pg_database d
       WHERE starts_with(d.datname, $1) AND NOT EXISTS (SELECT 1 FROM sandbox_templates t WHERE t.name = d.datname)
       ORDER BY 1`,
      [templatePrefix(await this.deploymentTag()), options.olderThanMs / 1000],
    );
    const dropped: string[] = [];
    for (const { name } of rows) {
      const fingerprint = /_([0-9a-f]{12})$/.exec(name)?.[1];
      if (!fingerprint) continue; // not a name this pool builds: not ours to judge
      if (options.dryRun || (await this.dropUnusedTemplate(name, fingerprint))) dropped.push(name);
    }
    return dropped;
  }

  /** Drops one template unless it is being built or a sandbox row names it; false = kept. */
  private async dropUnusedTemplate(name: string, fingerprint: string): Promise<boolean> {
    const client = await this.admin.connect();
    const lock = templateLock(fingerprint);
    try {
      const { rows } = await client.query<{ free: boolean }>('SELECT pg_try_advisory_lock($1) AS free', [lock]);
      if (!rows[0]!.free) return false; // a build of it (or of a namesake fingerprint) is running
      try {
        await client.query('BEGIN');
        // A clone inserts its row first; with the table locked none starts now, and later ones fail on the
        // foreign key (the template row is gone) and rebuild the template.
        await client.query('LOCK TABLE sandboxes IN SHARE ROW EXCLUSIVE MODE');
        const used = await client.query('SELECT 1 FROM sandboxes WHERE template = $1', [name]);
        if (used.rowCount) {
          await client.query('ROLLBACK');
          return false;
        }
        await client.query('DELETE FROM sandbox_templates WHERE name = $1', [name]);
        await client.query('COMMIT');
        const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
        if (exists.rowCount) {
          await client.query(`ALTER DATABASE ${quoteIdent(name)} WITH IS_TEMPLATE false`);
          await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
        }
        return true;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [lock]);
      }
    } finally {
      client.release();
    }
  }

  /** Waits for background refills, then closes the admin connections. Ready clones stay for the next run. */
  async close(): Promise<void> {
    this.closed = true;
    for (const name of [...this.renewals.keys()]) this.stopRenewing(name);
    await Promise.allSettled([...this.refills.values()]);
    await this.admin.end();
  }
}

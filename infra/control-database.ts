import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { databaseUrl, repoRoot, type Environment } from '../config/environment.ts';
import { InfrastructureError } from '../core/errors.ts';

/**
 * The control database and the three restricted roles every sandbox of a deployment grants to: the agent role
 * (tool handlers: read and write their own sandbox's tables, nothing else), the reader role (checks: read-only
 * sessions) and the owner role (owns the scenario tables: runs schema, seed and data patches, without superuser
 * rights). Roles are server-wide in Postgres, so their names carry the deployment's tag: deployments sharing a
 * server never reset each other's passwords or reach each other's sandboxes through a shared role.
 */

export interface DeploymentRoles {
  agent: string;
  reader: string;
  owner: string;
}

export function deploymentRoles(tag: string): DeploymentRoles {
  return { agent: `tbt_agent_${tag}`, reader: `tbt_reader_${tag}`, owner: `tbt_owner_${tag}` };
}

/** This deployment's tag (`deployment.tag`: random, 8 hex), part of every database and role name it creates. */
export async function readDeploymentTag(db: Pick<pg.ClientBase, 'query'>): Promise<string> {
  const { rows } = await db.query<{ tag: string }>('SELECT tag FROM deployment');
  const tag = rows[0]?.tag;
  if (!tag || !/^[0-9a-f]{8}$/.test(tag)) throw new InfrastructureError('control database has no deployment tag');
  return tag;
}

/**
 * A restricted role's password derived from the admin password in the control URL (HMAC), so every worker
 * holding the admin URL agrees on it without another secret to distribute. Undefined when the admin URL has
 * no password (a server that authenticates otherwise): then the role gets no password either.
 */
export function derivedRolePassword(controlUrl: string, role: string): string | undefined {
  const admin = decodeURIComponent(new URL(controlUrl).password);
  if (!admin) return undefined;
  return createHmac('sha256', admin).update(`tbt role password:${role}`).digest('hex').slice(0, 32);
}

/** The password a restricted role logs in with: the configured one, else the derived one. */
export function rolePassword(controlUrl: string, role: string, configured: string | undefined): string | undefined {
  return configured ?? derivedRolePassword(controlUrl, role);
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export function withRole(url: string, role: string, password: string | undefined): string {
  const u = new URL(url);
  u.username = role;
  u.password = password ?? '';
  return u.toString();
}

export function databaseName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1)) || 'postgres';
}

export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

const pools = new Map<string, pg.Pool>();

/**
 * Like `withClient`, on a connection kept open per URL and process. For the per-episode reads and writes of
 * the control database: a new connection costs a server process and a SCRAM handshake on both sides, which
 * was most of what storing an episode cost (bench/scale). Idle connections close after 30 s and never keep
 * the process alive; after a failed call the connection is closed and the next call connects anew. The callback
 * must leave no session state behind (no SET, temporary tables or session locks).
 */
export async function withPooledClient<T>(url: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  let pool = pools.get(url);
  if (!pool) {
    pool = new pg.Pool({
      connectionString: url,
      max: 8,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: 10_000,
      allowExitOnIdle: true,
    });
    // An idle connection the server closed (a restart): the pool drops it; the error must not crash the process.
    pool.on('error', () => undefined);
    pools.set(url, pool);
  }
  const client = await pool.connect();
  try {
    const result = await fn(client);
    client.release();
    return result;
  } catch (err) {
    // After any failure the connection is closed, not reused: errors are rare and its state is unknown.
    client.release(true);
    throw err;
  }
}

/**
 * Creates the control database (if missing), its tables and this deployment's restricted roles. Idempotent.
 * Roles named before the tag was part of their names (`tbt_agent`, `tbt_reader`, `tbt_owner`) are left alone:
 * another deployment on the server may still use them (docs/operations.md says how to drop them).
 */
export async function ensureControlDatabase(env: Environment): Promise<void> {
  const url = databaseUrl(env);
  const name = databaseName(url);
  await withClient(withDatabase(url, 'postgres'), async (c) => {
    // Every worker runs this at start, several at once: one at a time (concurrent REVOKEs on one database fail
    // with 'tuple concurrently updated').
    await c.query('SELECT pg_advisory_lock(7233000)');
    try {
      const exists = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
      if (exists.rowCount === 0) {
        await c.query(`CREATE DATABASE ${quoteIdent(name)}`).catch((err: { code?: string }) => {
          if (err.code !== '42P04') throw err; // created concurrently
        });
      }
      // Restricted roles must never reach the control database or the maintenance databases.
      await c.query(`REVOKE CONNECT ON DATABASE ${quoteIdent(name)} FROM PUBLIC`);
      for (const db of ['postgres', 'template1']) {
        // An external server's admin may not own these; the role attributes still keep tools out.
        await c.query(`REVOKE CONNECT ON DATABASE ${db} FROM PUBLIC`).catch(() => undefined);
      }
    } finally {
      await c.query('SELECT pg_advisory_unlock(7233000)');
    }
  });
  const schema = fs.readFileSync(path.join(repoRoot, 'infra', 'control-schema.sql'), 'utf8');
  await withClient(url, async (c) => {
    // Locks of the control database: they serialize this deployment's workers only, and its roles are its own.
    await c.query('SELECT pg_advisory_lock(7233001)');
    try {
      await c.query(schema);
      await ensureRoles(c, deploymentRoles(await readDeploymentTag(c)));
    } finally {
      await c.query('SELECT pg_advisory_unlock(7233001)');
    }
  });
  async function ensureRoles(c: pg.Client, roles: DeploymentRoles): Promise<void> {
    // Two ALTER ROLEs on one role at the same moment fail with 'tuple concurrently updated' (a bookkeeping worker
    // died of it and its campaign waited): the caller holds the lock.
    for (const [role, password] of [
      [roles.agent, rolePassword(url, roles.agent, env.TBT_AGENT_DB_PASSWORD)],
      [roles.reader, rolePassword(url, roles.reader, env.TBT_READER_DB_PASSWORD)],
      [roles.owner, rolePassword(url, roles.owner, undefined)],
    ] as const) {
      await c.query(`DO $$ BEGIN
        CREATE ROLE ${quoteIdent(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT CONNECTION LIMIT 500;
        EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
      if (password) await c.query(`ALTER ROLE ${quoteIdent(role)} PASSWORD ${pg.escapeLiteral(password)}`);
    }
    await c.query(`ALTER ROLE ${quoteIdent(roles.reader)} SET default_transaction_read_only = on`);
    // A non-superuser admin (CREATEDB, CREATEROLE) must be a member of the owner role to hand it the public schema
    // of each template; a superuser needs nothing, and a server that refuses leaves the template build to say so.
    await c.query(`GRANT ${quoteIdent(roles.owner)} TO CURRENT_USER`).catch(() => undefined);
  }
}

import pg from 'pg';
import { z } from 'zod';
import { postgresUrlProblem } from '../config/environment.ts';
import { databaseName, quoteIdent, withClient, withDatabase } from '../infra/control-database.ts';

/**
 * The restricted admin of a compose deployment: the role in DATABASE_URL, which every worker holds, is made a
 * non-superuser (LOGIN CREATEDB CREATEROLE) by the one-shot `setup` service, the only service that gets the
 * control server's superuser URL. A worker that leaks its URL then leaks no `COPY ... TO PROGRAM`, no server
 * files, no way to make itself superuser. What the workers do with it (infra/control-database.ts, the sandbox
 * pool): create the restricted roles and grant itself membership (CREATEROLE), create, clone and drop
 * databases (CREATEDB, owner of the control database), and drop a clone whose tool role is still connected
 * (`DROP DATABASE ... WITH (FORCE)`, which needs pg_signal_backend for roles it is not a member of).
 */

export const setupEnvironmentSchema = z.object({
  TBT_CONTROL_DB_SUPERUSER_URL: z
    .string()
    .superRefine((text, ctx) => {
      const problem = postgresUrlProblem(text);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .optional()
    .describe(
      "setup only: the control server's superuser, which makes DATABASE_URL's role a non-superuser admin; " +
        'unset = DATABASE_URL is already such a role',
    ),
});

/** setup's own variable, read once; the message names the variable, never the value. */
export function readSetupEnvironment(env: NodeJS.ProcessEnv = process.env): z.infer<typeof setupEnvironmentSchema> {
  const parsed = setupEnvironmentSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`environment variable ${issue.path.join('.')}: ${issue.message}`);
  }
  return parsed.data;
}

/**
 * Makes (or updates) DATABASE_URL's role as a non-superuser admin with the URL's password, and its database owned
 * by it, connected as the superuser. Idempotent; an admin that was the superuser (deployments from before) loses
 * superuser. Throws when both URLs name the same role: the superuser cannot be its own restricted admin.
 */
export async function ensureRestrictedAdmin(superuserUrl: string, adminUrl: string): Promise<void> {
  const admin = new URL(adminUrl);
  const role = decodeURIComponent(admin.username);
  const password = decodeURIComponent(admin.password);
  const database = databaseName(adminUrl);
  if (!role) throw new Error('DATABASE_URL names no user: the restricted admin needs one');
  if (role === decodeURIComponent(new URL(superuserUrl).username))
    throw new Error(`DATABASE_URL's user ${role} must not be the superuser of TBT_CONTROL_DB_SUPERUSER_URL`);
  await withClient(withDatabase(superuserUrl, 'postgres'), async (c) => {
    // Several setups at once (a rerun while one is still going): one at a time.
    await c.query('SELECT pg_advisory_lock(7233002)');
    try {
      const exists = await c.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
      if (exists.rowCount === 0) await c.query(`CREATE ROLE ${quoteIdent(role)}`);
      await c.query(
        `ALTER ROLE ${quoteIdent(role)} LOGIN NOSUPERUSER CREATEDB CREATEROLE NOREPLICATION NOBYPASSRLS ` +
          (password ? `PASSWORD ${pg.escapeLiteral(password)}` : 'PASSWORD NULL'),
      );
      await c.query(`GRANT pg_signal_backend TO ${quoteIdent(role)}`);
      const db = await c.query('SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = $1', [
        database,
      ]);
      if (db.rowCount === 0) await c.query(`CREATE DATABASE ${quoteIdent(database)} OWNER ${quoteIdent(role)}`);
      else if (db.rows[0].owner !== role)
        await c.query(`ALTER DATABASE ${quoteIdent(database)} OWNER TO ${quoteIdent(role)}`);
      // The maintenance databases: only the admin (and the superuser) may connect; restricted roles never.
      await c.query('REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC');
      await c.query(`GRANT CONNECT ON DATABASE postgres TO ${quoteIdent(role)}`);
    } finally {
      await c.query('SELECT pg_advisory_unlock(7233002)');
    }
  });
}

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { databaseUrl, readEnvironment, repoRoot } from '../config/environment.ts';
import { localPasswordFile } from '../config/local-database-password.ts';
import { scenarioSchema } from '../config/task-schema.ts';
import { openToolSession } from '../rollout/mcp-tool-session.ts';
import { sandboxPrefix, type Sandbox, type SandboxPool } from '../sandbox/sandbox-pool.ts';
import { ensureControlDatabase, withClient, withDatabase, withRole } from '../infra/control-database.ts';
import { pruneEpisodeRecords } from '../infra/retention.ts';
import { postgresFiles, postgresReachable, startPostgres, stopPostgres } from '../infra/local-postgres.ts';
import { controlReady, newPool } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Security review findings 1-7 (sandboxes, the control database, the local server): each test is named after
 * its finding and fails on the code before the fix. See docs/security.md.
 */

const scenario = scenarioSchema.parse({
  name: 'security_notes',
  instructions: 'Keep notes.',
  schema: 'CREATE TABLE notes (id integer PRIMARY KEY, body text NOT NULL);',
  seed: "INSERT INTO notes VALUES (1, 'alpha');",
  tools: [
    {
      name: 'count_notes',
      description: 'Count notes.',
      input_schema: { type: 'object', properties: {} },
      sql: 'SELECT count(*)::int AS n FROM notes',
      result: 'row',
    },
    {
      name: 'slow_notes',
      description: 'Count notes, slowly.',
      input_schema: { type: 'object', properties: {} },
      sql: 'SELECT count(*)::int AS n, pg_sleep(2) FROM notes',
      result: 'row',
    },
  ],
});

let controlUrl: string;
let pool: SandboxPool;
before(async () => {
  controlUrl = await controlReady();
  pool = newPool();
});
after(async () => {
  await pool.close();
});

async function databaseExists(name: string): Promise<boolean> {
  const r = await withClient(controlUrl, (c) => c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]));
  return r.rowCount === 1;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

test("finding 1: sweeper keeps another deployment's live sandbox (and LIKE wildcards match nothing)", async () => {
  const otherControl = withDatabase(controlUrl, `tbt_f1_other_${crypto.randomBytes(3).toString('hex')}`);
  await ensureControlDatabase(readEnvironment({ ...process.env, DATABASE_URL: otherControl }));
  const other = newPool({ controlUrl: otherControl, orphanMinAgeMs: 0 });
  const lookalike = 'tbtxsbxx_f1_wildcard';
  const live = await pool.acquire(scenario, 'test:finding-1');
  try {
    await withClient(controlUrl, (c) => c.query(`CREATE DATABASE ${lookalike}`));
    const { dropped } = await other.sweep();
    assert.deepEqual(
      dropped.filter((n) => n === live.name || n === lookalike),
      [],
      'the other deployment drops neither',
    );
    assert.ok(await databaseExists(live.name), "deployment 1's leased sandbox survives deployment 2's sweep");
    await withClient(live.agentUrl, (c) => c.query('SELECT count(*) FROM notes'));
  } finally {
    await other.close();
    await pool.release(live);
    await withClient(controlUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${lookalike}`));
    await dropDeployment(otherControl); // its roles too: they are named after its tag
  }
});

test('finding 1: an own orphan database is dropped only once it is older than the minimum age', async () => {
  const patient = newPool({ orphanMinAgeMs: 60_000 });
  const orphan = `${sandboxPrefix(await patient.deploymentTag())}f1_orphan`;
  try {
    await withClient(controlUrl, (c) => c.query(`CREATE DATABASE ${orphan}`));
    assert.ok(!(await patient.sweep()).dropped.includes(orphan), 'a newly seen orphan is kept');
    assert.ok(await databaseExists(orphan));
    await withClient(controlUrl, (c) =>
      c.query(`UPDATE sandbox_orphans SET first_seen = now() - interval '2 minutes' WHERE name = $1`, [orphan]),
    );
    assert.ok((await patient.sweep()).dropped.includes(orphan), 'an orphan seen long enough ago is dropped');
    assert.ok(!(await databaseExists(orphan)));
  } finally {
    await patient.close();
    await withClient(controlUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${orphan}`));
  }
});

test("finding 2: a held lease is renewed, so another worker's sweep keeps a long episode's sandbox", async () => {
  const shortLease = newPool({ leaseMs: 1500 });
  const sweeper = newPool();
  const sandbox = await shortLease.acquire(scenario, 'test:finding-2');
  try {
    await sleep(3500); // more than two leases
    const { dropped } = await sweeper.sweep();
    assert.ok(!dropped.includes(sandbox.name), 'the renewed lease has not lapsed');
    await withClient(sandbox.agentUrl, (c) => c.query('SELECT count(*) FROM notes'));
  } finally {
    await shortLease.release(sandbox);
    await shortLease.close();
    await sweeper.close();
  }
});

test('finding 2: acquire skips an expired ready clone (a sweep may be dropping it)', async () => {
  const warm = newPool({ warm: 1 });
  try {
    const template = await warm.ensureTemplate(scenario);
    await warm.refill(template);
    const ready = await withClient(controlUrl, (c) =>
      c.query<{ name: string }>(`SELECT name FROM sandboxes WHERE template = $1 AND state = 'ready'`, [template]),
    );
    assert.ok(ready.rowCount! >= 1);
    await withClient(controlUrl, (c) =>
      c.query(`UPDATE sandboxes SET expires_at = now() - interval '1 second' WHERE template = $1 AND state = 'ready'`, [
        template,
      ]),
    );
    const leased = await warm.acquire(scenario, 'test:finding-2-expired');
    assert.ok(!ready.rows.some((r) => r.name === leased.name), 'an expired ready clone is never leased');
    await warm.release(leased);
  } finally {
    const sweeper = newPool();
    await sweeper.sweep().finally(() => sweeper.close());
    await warm.close();
  }
});

test('finding 3: the local Postgres trusts nobody: no password over TCP, no other role on the socket', async (t) => {
  if (os.userInfo().uid === 0 && !fs.existsSync('/usr/sbin/runuser') && !fs.existsSync('/usr/bin/runuser'))
    return t.skip('needs runuser as root');
  const stateDir = path.join(repoRoot, '.state', `test-finding-3-${crypto.randomBytes(3).toString('hex')}`);
  const e = { ...readEnvironment({ ...process.env, TBT_STATE_DIR: stateDir }), DATABASE_URL: undefined };
  e.TBT_PG_PORT = await freePort();
  try {
    await startPostgres(e);
    const noPassword = new pg.Client({ connectionString: `postgres://tbt@127.0.0.1:${e.TBT_PG_PORT}/postgres` });
    await assert.rejects(noPassword.connect(), /password/);
    await noPassword.end().catch(() => undefined);
    const mode = fs.statSync(localPasswordFile(stateDir)).mode & 0o777;
    assert.equal(mode, 0o600, 'the generated password is readable by its owner only');
    assert.ok(
      await postgresReachable(withDatabase(databaseUrl(e), 'postgres')),
      'databaseUrl carries the generated password',
    );
    const socket = postgresFiles(e).data;
    const asTbt = new pg.Client({ host: socket, port: e.TBT_PG_PORT, user: 'tbt', database: 'postgres' });
    await asTbt.connect(); // peer: the OS user who ran tbt up is role tbt
    await asTbt.query("CREATE ROLE f3_probe LOGIN PASSWORD 'probe'");
    await asTbt.end();
    const asOther = new pg.Client({ host: socket, port: e.TBT_PG_PORT, user: 'f3_probe', database: 'postgres' });
    await assert.rejects(asOther.connect(), /authentication failed|no pg_hba.conf entry/);
    await asOther.end().catch(() => undefined);
  } finally {
    await stopPostgres(e).catch(() => undefined);
    fs.rmSync(postgresFiles(e).dir, { recursive: true, force: true });
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
});

test('finding 4: scenario seed and task data patches run without superuser rights', async () => {
  const copyToProgram = "COPY (SELECT 1) TO PROGRAM 'true'";
  const hostile = scenarioSchema.parse({ ...scenario, name: 'security_hostile', seed: copyToProgram });
  await assert.rejects(pool.ensureTemplate(hostile), /schema or seed failed: must be superuser/);
  await assert.rejects(pool.acquire(scenario, 'test:finding-4', { dataPatch: copyToProgram }), /must be superuser/);
  const notSuper = `DO $$ BEGIN IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                   THEN RAISE EXCEPTION 'patch ran as superuser %', current_user; END IF; END $$`;
  const patched = await pool.acquire(scenario, 'test:finding-4', { dataPatch: notSuper });
  await pool.release(patched);
});

test(
  "finding 5: a sandbox grants no CONNECT or TEMP to PUBLIC, and one sandbox's tool credential opens no " + 'other',
  async () => {
    const sandbox = await pool.acquire(scenario, 'test:finding-5');
    const sibling = await pool.acquire(scenario, 'test:finding-5-sibling');
    const probe = `f5_probe_${crypto.randomBytes(3).toString('hex')}`;
    try {
      for (const target of [sibling.name, new URL(controlUrl).pathname.slice(1)]) {
        const across = new pg.Client({ connectionString: withDatabase(sandbox.agentUrl, target) });
        across.on('error', () => undefined);
        await assert.rejects(across.connect(), /permission denied for database/, `tool role of A on ${target}`);
        await across.end().catch(() => undefined);
      }
      await withClient(controlUrl, (c) => c.query(`CREATE ROLE ${probe} LOGIN PASSWORD 'probe'`));
      const asProbe = new pg.Client({ connectionString: withRole(sandbox.adminUrl, probe, 'probe') });
      asProbe.on('error', () => undefined);
      await assert.rejects(asProbe.connect(), /permission denied for database/);
      await asProbe.end().catch(() => undefined);
      await withClient(sandbox.agentUrl, async (c) => {
        await assert.rejects(c.query('CREATE TEMP TABLE scratch (id int)'), /permission denied to create temporary/);
        assert.equal((await c.query('SELECT count(*)::int AS n FROM notes')).rows[0].n, 1, 'the tool role still works');
      });
    } finally {
      await pool.release(sandbox);
      await pool.release(sibling);
      await withClient(controlUrl, (c) => c.query(`DROP ROLE IF EXISTS ${probe}`));
    }
  },
);

test('finding 6: a statement timeout (57014) is a tool error the agent sees, not an infrastructure error', async () => {
  const sandbox = await pool.acquire(scenario, 'test:finding-6');
  try {
    const session = await openToolSession(scenario, sandbox, { statementTimeoutMs: 200 });
    try {
      const slow = await session.callTool('slow_notes', {});
      assert.equal(slow.isError, true);
      assert.match(slow.text, /slow_notes failed: canceling statement due to statement timeout/);
      const next = await session.callTool('count_notes', {});
      assert.deepEqual(JSON.parse(next.text), { n: 1 }, 'the session carries on after the timeout');
    } finally {
      await session.close();
    }
  } finally {
    await pool.release(sandbox);
  }
});

test('finding 7: tbt up as root works from a mode-700 folder (mktemp -d)', async (t) => {
  if (os.userInfo().uid !== 0) return t.skip('only root runs the server as another user');
  const home = testTempDir('tbt-private-');
  assert.equal(fs.statSync(home).mode & 0o777, 0o700);
  const e = {
    ...readEnvironment({ ...process.env, TBT_STATE_DIR: path.join(home, '.state') }),
    DATABASE_URL: undefined,
  };
  e.TBT_PG_PORT = await freePort();
  try {
    await startPostgres(e);
    assert.ok(await postgresReachable(withDatabase(databaseUrl(e), 'postgres')));
    assert.ok(!postgresFiles(e).dir.startsWith(home), 'the data lives where the server user can reach it');
  } finally {
    await stopPostgres(e).catch(() => undefined);
    fs.rmSync(postgresFiles(e).dir, { recursive: true, force: true });
  }
});

/** Drops what a test deployment left on the server: its databases (templates too), its roles, its control database. */
async function dropDeployment(otherControl: string): Promise<void> {
  const control = new URL(otherControl).pathname.slice(1);
  await withClient(controlUrl, async (c) => {
    const known = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [control]);
    const tag = known.rowCount
      ? await withClient(
          withDatabase(controlUrl, control),
          async (d) => (await d.query('SELECT tag FROM deployment')).rows[0]?.tag,
        )
      : undefined;
    if (tag) {
      const dbs = await c.query<{ name: string }>(
        `SELECT datname AS name FROM pg_database WHERE starts_with(datname, $1) OR starts_with(datname, $2)`,
        [`tbt_sbx_${tag}_`, `tbt_tpl_${tag}_`],
      );
      for (const { name } of dbs.rows) {
        await c.query(`ALTER DATABASE ${name} WITH IS_TEMPLATE false`);
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      }
    }
    await c.query(`DROP DATABASE IF EXISTS ${control} WITH (FORCE)`);
    // Only roles named after this deployment's tag: never the shared ones another deployment still uses.
    if (tag) {
      const roles = await c.query<{ name: string }>(
        `SELECT rolname AS name FROM pg_roles WHERE starts_with(rolname, $1) OR rolname LIKE $2`,
        [`tbt_sbx_${tag}_`, `tbt\\_%\\_${tag}`],
      );
      for (const { name } of roles.rows) await c.query(`DROP ROLE IF EXISTS ${name}`);
    }
  });
}

/** The roles a sandbox's connections log in as, and the role its tool role inherits table rights from. */
async function rolesOf(sandbox: Sandbox): Promise<string[]> {
  const tool = await withClient(controlUrl, (c) =>
    c.query<{ name: string }>(
      `SELECT g.rolname AS name FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
       JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1`,
      [sandbox.name],
    ),
  );
  const login = (url: string) => decodeURIComponent(new URL(url).username);
  return [login(sandbox.ownerUrl), login(sandbox.readerUrl), login(sandbox.agentUrl), ...tool.rows.map((r) => r.name)];
}

test(
  "second review, finding 5: deployments with different admins keep each other's role passwords and " +
    'sandboxes apart',
  async () => {
    const suffix = crypto.randomBytes(3).toString('hex');
    const adminB = `f5b_admin_${suffix}`;
    const passwordB = crypto.randomBytes(12).toString('hex');
    // Deployment B: another control database on this server, run by a non-superuser admin of its own.
    await withClient(controlUrl, async (c) => {
      await c.query(`CREATE ROLE ${adminB} LOGIN CREATEDB CREATEROLE PASSWORD '${passwordB}'`);
      await c.query(`GRANT CONNECT ON DATABASE postgres TO ${adminB}`);
    });
    const controlB = withRole(withDatabase(controlUrl, `tbt_f5_b_${suffix}`), adminB, passwordB);
    const sandboxA = await pool.acquire(scenario, 'test:second-5-a');
    let poolB: SandboxPool | undefined;
    let sandboxB: Sandbox | undefined;
    try {
      const rolesA = await rolesOf(sandboxA);
      // Compared as digests of the stored verifiers, so a failure prints no password material.
      const passwords = (roles: string[]) =>
        withClient(controlUrl, async (c) =>
          (
            await c.query(`SELECT rolname, rolpassword FROM pg_authid WHERE rolname = ANY($1) ORDER BY 1`, [roles])
          ).rows.map((r) => `${r.rolname}:${crypto.createHash('sha256').update(String(r.rolpassword)).digest('hex')}`),
        );
      const passwordsA = await passwords(rolesA);
      await ensureControlDatabase(readEnvironment({ ...process.env, DATABASE_URL: controlB }));
      poolB = newPool({ controlUrl: controlB });
      sandboxB = await poolB.acquire(scenario, 'test:second-5-b');
      assert.deepEqual(await passwords(rolesA), passwordsA, "starting deployment B changes none of A's passwords");
      for (const url of [sandboxA.ownerUrl, sandboxA.readerUrl]) await withClient(url, (c) => c.query('SELECT 1'));
      const session = await openToolSession(scenario, sandboxA);
      try {
        assert.deepEqual(JSON.parse((await session.callTool('count_notes', {})).text), { n: 1 }, "A's tools log in");
      } finally {
        await session.close();
      }
      const rolesB = await rolesOf(sandboxB);
      const templateA = await pool.ensureTemplate(scenario);
      const templateB = await poolB.ensureTemplate(scenario);
      for (const [roles, sandbox, template, urls] of [
        [rolesA, sandboxB, templateB, [sandboxA.ownerUrl, sandboxA.readerUrl]],
        [rolesB, sandboxA, templateA, [sandboxB.ownerUrl, sandboxB.readerUrl]],
      ] as const) {
        for (const role of roles)
          for (const db of [sandbox.name, template]) {
            const { rows } = await withClient(controlUrl, (c) =>
              c.query(`SELECT has_database_privilege($1, $2, 'CONNECT') AS ok`, [role, db]),
            );
            assert.equal(rows[0].ok, false, `role ${role} may not connect to the other deployment's ${db}`);
          }
        for (const url of urls) {
          const across = new pg.Client({ connectionString: withDatabase(url, sandbox.name) });
          across.on('error', () => undefined);
          await assert.rejects(across.connect(), /permission denied for database|authentication failed/);
          await across.end().catch(() => undefined);
        }
      }
    } finally {
      await pool.release(sandboxA);
      if (sandboxB) await poolB!.release(sandboxB).catch(() => undefined);
      await poolB?.close();
      await dropDeployment(controlB);
      await withClient(controlUrl, async (c) => {
        await c.query(`REVOKE CONNECT ON DATABASE postgres FROM ${adminB}`);
        await c.query(`DROP ROLE IF EXISTS ${adminB}`);
      });
    }
  },
);

test(
  'second review, finding 7 (retention): gc drops unused superseded or old templates, never one in use, and ' +
    'episode records only when asked',
  async () => {
    const control = withDatabase(controlUrl, `tbt_f7r_${crypto.randomBytes(3).toString('hex')}`);
    await ensureControlDatabase(readEnvironment({ ...process.env, DATABASE_URL: control }));
    const deployment = newPool({ controlUrl: control });
    const sql = (text: string, values: unknown[] = []) => withClient(control, (c) => c.query(text, values));
    const backdate = (name: string, age: string) =>
      sql(`UPDATE sandbox_templates SET created_at = now() - $2::interval WHERE name = $1`, [name, age]);
    const exists = async (name: string) =>
      (await withClient(controlUrl, (c) => c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])))
        .rowCount === 1;
    let leased: Sandbox | undefined;
    try {
      const v1 = scenarioSchema.parse({ ...scenario, name: 'retention_notes' });
      const superseded = await deployment.ensureTemplate(v1);
      await backdate(superseded, '1 hour');
      const current = await deployment.ensureTemplate({ ...v1, seed: "INSERT INTO notes VALUES (1, 'beta');" });
      const aged = await deployment.ensureTemplate({ ...v1, name: 'retention_aged' });
      await backdate(aged, '40 days');
      const inUse = scenarioSchema.parse({ ...v1, name: 'retention_in_use' });
      leased = await deployment.acquire(inUse, 'test:finding-7-retention');
      const used = await deployment.ensureTemplate(inUse);
      await backdate(used, '40 days');
      const crashed = `tbt_tpl_${await deployment.deploymentTag()}_crashed_0123456789ab`; // a build that died
      await withClient(controlUrl, (c) => c.query(`CREATE DATABASE ${crashed}`));

      const month = 30 * 24 * 3600_000;
      const expected = [aged, crashed, superseded].sort();
      assert.deepEqual((await deployment.pruneTemplates({ olderThanMs: month, dryRun: true })).sort(), expected);
      assert.ok(await exists(superseded), 'a dry run drops nothing');
      assert.deepEqual((await deployment.pruneTemplates({ olderThanMs: month })).sort(), expected);
      for (const name of expected) assert.ok(!(await exists(name)), `${name} is dropped`);
      for (const name of [current, used]) assert.ok(await exists(name), `${name} is kept`);
      // A worker that still holds the dropped template's name rebuilds it instead of failing its episodes.
      await deployment.release(await deployment.acquire(v1, 'test:finding-7-rebuilt'));

      // Records: an old ad hoc episode, a campaign idle for 40 days, a campaign with a recent step.
      const episode = (id: string, campaign: string | null, age: string) =>
        sql(
          `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, status, started_at,
             finished_at) VALUES ($1, 't', 's', 'sc', 'd', 'eval', $2, 'success', now() - $3::interval,
             now() - $3::interval)`,
          [id, campaign, age],
        );
      await episode('old-adhoc', null, '40 days');
      await episode('new-adhoc', null, '1 day');
      await episode('idle-1', 'idle', '40 days');
      await episode('live-1', 'live', '40 days');
      await sql(`INSERT INTO campaign_steps (campaign, step, record, recorded_at)
                 VALUES ('idle', 1, '{}', now() - interval '40 days'), ('live', 1, '{}', now())`);
      const ids = async () => (await sql('SELECT id FROM episodes ORDER BY id')).rows.map((r) => r.id);
      const dry = await pruneEpisodeRecords(control, { olderThanDays: 30, dryRun: true });
      assert.deepEqual(dry, { episodes: 2, campaignSteps: 1, campaignFiles: 0, campaigns: ['idle'] });
      assert.deepEqual(await ids(), ['idle-1', 'live-1', 'new-adhoc', 'old-adhoc'], 'a dry run deletes nothing');
      assert.deepEqual(await pruneEpisodeRecords(control, { olderThanDays: 30 }), dry);
      assert.deepEqual(await ids(), ['live-1', 'new-adhoc'], 'a campaign with recent activity keeps all its rows');
      const steps = await sql('SELECT campaign FROM campaign_steps ORDER BY 1');
      assert.deepEqual(steps.rows, [{ campaign: 'live' }]);
    } finally {
      if (leased) await deployment.release(leased);
      await deployment.close();
      await dropDeployment(control);
    }
  },
);

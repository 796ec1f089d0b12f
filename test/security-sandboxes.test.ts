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
import { sandboxPrefix, type SandboxPool } from '../sandbox/sandbox-pool.ts';
import { ensureControlDatabase, withClient, withDatabase, withRole } from '../infra/control-database.ts';
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
    await withClient(controlUrl, async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${lookalike}`);
      await c.query(`DROP DATABASE IF EXISTS ${new URL(otherControl).pathname.slice(1)} WITH (FORCE)`);
    });
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

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { scenarioSchema } from '../config/task-schema.ts';
import { openToolSession } from '../rollout/mcp-tool-session.ts';
import { sandboxPrefix, type SandboxPool } from '../sandbox/sandbox-pool.ts';
import { readCanonicalState } from '../sandbox/terminal-state-grader.ts';
import { stateHash } from '../core/canonical-state.ts';
import { rolePassword, withClient, withRole } from '../infra/control-database.ts';
import { controlReady, newPool } from './helpers/stack.ts';

const scenario = scenarioSchema.parse({
  name: 'notes_isolation',
  instructions: 'Keep notes.',
  schema: 'CREATE TABLE notes (id integer PRIMARY KEY, body text NOT NULL);',
  seed: "INSERT INTO notes VALUES (1, 'alpha'), (2, 'beta');",
  tools: [
    {
      name: 'find_note',
      description: 'Find notes by exact body.',
      input_schema: { type: 'object', properties: { body: { type: 'string' } }, required: ['body'] },
      sql: 'SELECT id, body FROM notes WHERE body = :body ORDER BY id',
    },
    {
      name: 'search_notes',
      description: 'Search notes.',
      input_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      sql: "SELECT id, body FROM notes WHERE body LIKE '%' || :text || '%' ORDER BY id",
    },
    {
      name: 'set_note',
      description: 'Change a note.',
      input_schema: {
        type: 'object',
        properties: { id: { type: 'integer' }, body: { type: 'string' } },
        required: ['id', 'body'],
      },
      sql: 'UPDATE notes SET body = :body WHERE id = :id',
      result: 'affected',
    },
  ],
});

const payloads = [
  "x' OR '1'='1",
  "'; DROP TABLE notes; --",
  "x'; UPDATE notes SET body = 'pwned'; --",
  "' UNION SELECT 1, current_database() --",
  "' UNION SELECT 1, string_agg(name, ',') FROM sandboxes --",
  "'; SELECT pg_terminate_backend(pid) FROM pg_stat_activity; --",
  '$$; DROP TABLE notes; $$',
  "\\'; DELETE FROM notes; --",
  "'; COPY notes TO PROGRAM 'id'; --",
  "'); DROP DATABASE tbt; --",
];

let pool: SandboxPool;
let controlUrl: string;
before(async () => {
  controlUrl = await controlReady();
  pool = newPool();
});
after(async () => {
  await pool.close();
});

test(
  'SQL injection payloads in tool arguments are data: they neither read nor change anything outside the ' + 'call',
  async () => {
    const a = await pool.acquire(scenario, 'test:injection-a');
    const b = await pool.acquire(scenario, 'test:injection-b');
    try {
      const beforeB = stateHash(await readCanonicalState(b, scenario));
      const controlBefore = await withClient(controlUrl, (c) =>
        c.query(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'`),
      );
      const session = await openToolSession(scenario, a);
      try {
        for (const body of payloads) {
          const found = await session.callTool('find_note', { body });
          assert.equal(found.isError, false, found.text);
          assert.deepEqual(JSON.parse(found.text), [], `payload ${body} must match no row`);
          const searched = await session.callTool('search_notes', { text: body });
          assert.deepEqual(JSON.parse(searched.text), [], `payload ${body} must match no row`);
        }
        // A payload stored through a write tool is stored verbatim, in this sandbox only.
        const written = await session.callTool('set_note', { id: 2, body: payloads[2]! });
        assert.deepEqual(JSON.parse(written.text), { affected: 1 });
        // Type confusion is refused by the schema, not passed to SQL.
        const typed = await session.callTool('set_note', { id: '1 OR 1=1', body: 'x' });
        assert.equal(typed.isError, true);
        assert.match(typed.text, /invalid arguments for set_note: \/id must be integer/);
      } finally {
        await session.close();
      }
      const stateA = await readCanonicalState(a, scenario);
      assert.deepEqual(stateA.notes, { 'id=1': { id: 1, body: 'alpha' }, 'id=2': { id: 2, body: payloads[2] } });
      assert.equal(stateHash(await readCanonicalState(b, scenario)), beforeB, 'the other sandbox is untouched');
      const controlAfter = await withClient(controlUrl, (c) =>
        c.query(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'`),
      );
      assert.equal(controlAfter.rows[0].n, controlBefore.rows[0].n, 'the control database is untouched');
    } finally {
      await pool.release(a);
      await pool.release(b);
    }
  },
);

test('the tool role cannot connect to the control database, and the checking role cannot write', async () => {
  const { agent } = await pool.roles();
  const agentOnControl = new pg.Client({
    connectionString: withRole(controlUrl, agent, rolePassword(controlUrl, agent, process.env.TBT_AGENT_DB_PASSWORD)),
  });
  await assert.rejects(agentOnControl.connect(), /permission denied for database/);
  await agentOnControl.end().catch(() => undefined);
  const sandbox = await pool.acquire(scenario, 'test:roles');
  try {
    await withClient(sandbox.readerUrl, async (c) => {
      await assert.rejects(c.query("UPDATE notes SET body = 'x'"), /read-only transaction/);
      assert.equal((await c.query('SELECT count(*)::int AS n FROM notes')).rows[0].n, 2);
    });
    await withClient(sandbox.agentUrl, async (c) => {
      await assert.rejects(c.query('CREATE TABLE extra (id int)'), /permission denied for schema public/);
      await assert.rejects(c.query('DROP TABLE notes'), /must be owner of table notes/);
    });
  } finally {
    await pool.release(sandbox);
  }
});

test(
  'warm pool: refills to the target, serves a ready clone, released sandboxes disappear, the sweeper removes ' +
    'expired leases and orphans',
  async () => {
    const warm = newPool({ warm: 2, leaseMs: 60_000, orphanMinAgeMs: 0 });
    try {
      const orphan = `${sandboxPrefix(await warm.deploymentTag())}orphan_test`;
      const first = await warm.acquire(scenario, 'test:warm-1');
      await warm.refill(await warm.ensureTemplate(scenario));
      const ready = await withClient(controlUrl, (c) =>
        c.query<{ name: string }>(
          `SELECT s.name FROM sandboxes s JOIN sandbox_templates t ON t.name = s.template WHERE t.scenario = $1 AND ` +
            `s.state = 'ready'`,
          [scenario.name],
        ),
      );
      assert.ok(ready.rowCount! >= 2, `expected 2 ready clones, got ${ready.rowCount}`);
      const second = await warm.acquire(scenario, 'test:warm-2');
      assert.ok(
        ready.rows.some((r) => r.name === second.name),
        'the second acquire takes a ready clone',
      );
      await warm.release(first);
      const gone = await withClient(controlUrl, (c) =>
        c.query('SELECT 1 FROM pg_database WHERE datname = $1', [first.name]),
      );
      assert.equal(gone.rowCount, 0);
      // Simulate a crashed worker: its lease expires; and an orphan database nobody recorded.
      await withClient(controlUrl, async (c) => {
        await c.query(`UPDATE sandboxes SET expires_at = now() - interval '1 second' WHERE name = $1`, [second.name]);
        await c.query(`CREATE DATABASE ${orphan}`);
      });
      // Another worker sweeps (this pool would keep renewing what it holds). The minimum orphan age is zero
      // here, so the first sighting is old enough.
      const sweeper = newPool({ orphanMinAgeMs: 0 });
      const { dropped } = await sweeper.sweep().finally(() => sweeper.close());
      assert.ok(dropped.includes(second.name));
      assert.ok(dropped.includes(orphan));
      const left = await withClient(controlUrl, (c) =>
        c.query(`SELECT datname FROM pg_database WHERE datname IN ($1, $2)`, [second.name, orphan]),
      );
      assert.equal(left.rowCount, 0);
    } finally {
      await warm.close();
    }
  },
);

test(
  "second review, finding 7 (creating rows): a failed clone leaves no 'creating' row, and a lapsed one is not " +
    'counted as warm',
  async () => {
    const creating = scenarioSchema.parse({ ...scenario, name: 'notes_creating' });
    const failing = newPool({ warm: 1 });
    const refilling = newPool({ warm: 1 });
    const rowsOf = async (template: string, state: string) =>
      withClient(controlUrl, (c) =>
        c.query<{ name: string }>(`SELECT name FROM sandboxes WHERE template = $1 AND state = $2`, [template, state]),
      );
    let template = '';
    try {
      template = await failing.ensureTemplate(creating);
      for (const state of ['ready', 'creating', 'leased'])
        for (const { name } of (await rowsOf(template, state)).rows) await failing.drop({ name }); // earlier runs
      // The template database vanishes under the pool (a restore, an operator): the refill's clone fails.
      await withClient(controlUrl, async (c) => {
        await c.query(`ALTER DATABASE ${template} WITH IS_TEMPLATE false`);
        await c.query(`DROP DATABASE ${template}`);
      });
      await failing.refill(template);
      assert.deepEqual((await rowsOf(template, 'creating')).rows, [], 'a failed clone leaves no creating row');
      // A crashed worker's 'creating' row whose lease lapsed: not warm, so the refill still clones.
      await withClient(controlUrl, async (c) =>
        c.query(
          `INSERT INTO sandboxes (name, template, state, expires_at)
           VALUES ($1, $2, 'creating', now() - interval '1 s')`,
          [`${sandboxPrefix(await refilling.deploymentTag())}f7_crashed`, template],
        ),
      );
      assert.equal(await refilling.ensureTemplate(creating), template, 'the template is rebuilt under its name');
      await refilling.refill(template);
      assert.equal((await rowsOf(template, 'ready')).rowCount, 1, 'one ready clone despite the lapsed creating row');
    } finally {
      for (const state of ['ready', 'creating', 'leased'])
        for (const { name } of (await rowsOf(template, state)).rows) await refilling.drop({ name });
      await failing.close();
      await refilling.close();
    }
  },
);

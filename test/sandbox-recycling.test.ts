import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { scenarioSchema } from '../config/task-schema.ts';
import type { Sandbox, SandboxPool } from '../sandbox/sandbox-pool.ts';
import { sandboxStateFingerprint } from '../sandbox/sandbox-recycler.ts';
import { readCanonicalState } from '../sandbox/terminal-state-grader.ts';
import { stateHash } from '../core/canonical-state.ts';
import { withClient } from '../infra/control-database.ts';
import { controlReady, controlUrl, newPool } from './helpers/stack.ts';

/**
 * Sandbox recycling (sandbox/sandbox-recycler.ts) on the real Postgres: a used sandbox, reset and returned
 * to the pool, holds exactly a fresh clone's state (rows, sequence positions, catalog); a reset that fails or
 * that leaves a different state drops the sandbox instead.
 */

const scenario = scenarioSchema.parse({
  name: 'recycle_lists',
  instructions: 'Keep lists.',
  schema: `CREATE TABLE lists (id serial PRIMARY KEY, name text NOT NULL);
    CREATE TABLE items (id serial PRIMARY KEY, list_id integer NOT NULL REFERENCES lists (id), body text NOT NULL);
    CREATE SEQUENCE tickets;`,
  seed: `INSERT INTO lists (name) VALUES ('home'), ('work');
    INSERT INTO items (list_id, body) VALUES (1, 'milk'), (2, 'report');
    SELECT nextval('tickets');`,
  tools: [
    {
      name: 'list_items',
      description: 'List items.',
      input_schema: { type: 'object', properties: {} },
      sql: 'SELECT id, body FROM items ORDER BY id',
    },
  ],
});

let recycling: SandboxPool;
let cloning: SandboxPool;
before(async () => {
  await controlReady();
  recycling = newPool({ recycle: true });
  cloning = newPool({ recycle: false });
});
after(async () => {
  await recycling.close();
  await cloning.close();
});

const fingerprint = (url: string) => withClient(url, sandboxStateFingerprint);
const rowsHash = async (sandbox: Sandbox) => stateHash(await readCanonicalState(sandbox, scenario));
async function exists(name: string): Promise<{ database: boolean; row: string | undefined }> {
  return withClient(controlUrl, async (c) => ({
    database: Boolean((await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount),
    row: (await c.query<{ state: string }>('SELECT state FROM sandboxes WHERE name = $1', [name])).rows[0]?.state,
  }));
}
/** What an episode might do: change, add and delete rows, advance sequences. */
async function scribble(adminUrl: string): Promise<void> {
  await withClient(adminUrl, (c) =>
    c.query(`UPDATE lists SET name = 'garden' WHERE id = 1; INSERT INTO lists (name) VALUES ('extra');
      INSERT INTO items (list_id, body) VALUES (3, 'seeds'); DELETE FROM items WHERE id = 2;
      SELECT nextval('tickets'), nextval('tickets');`),
  );
}

test('a recycled sandbox comes back with a fresh clone state and is leased again', async () => {
  const used = await recycling.acquire(scenario, 'test:recycle');
  const fresh = await cloning.acquire(scenario, 'test:fresh');
  try {
    await scribble(used.adminUrl);
    assert.notEqual(await rowsHash(used), await rowsHash(fresh), 'the episode changed the state');
    await recycling.release(used);
    assert.deepEqual(await exists(used.name), { database: true, row: 'ready' }, 'back in the pool, not dropped');
    const again = await recycling.acquire(scenario, 'test:recycle-2');
    assert.equal(again.name, used.name, 'the next acquire takes the recycled sandbox');
    assert.equal(await rowsHash(again), await rowsHash(fresh), 'rows equal a fresh clone');
    assert.equal(await fingerprint(again.adminUrl), await fingerprint(fresh.adminUrl), 'sequences and catalog too');
    // The sequences continue exactly as in a fresh clone.
    const next = (url: string) =>
      withClient(
        url,
        async (c) => (await c.query("SELECT nextval('lists_id_seq') AS a, nextval('tickets') AS b")).rows,
      );
    assert.deepEqual(await next(again.adminUrl), await next(fresh.adminUrl));
    await recycling.release(again);
  } finally {
    await cloning.release(fresh);
  }
});

test('a reset that fails drops the sandbox', async () => {
  const used = await recycling.acquire(scenario, 'test:recycle-fail');
  // A constraint the seed violates: the reset transaction fails and rolls back.
  await withClient(used.adminUrl, (c) =>
    c.query(`ALTER TABLE lists ADD CONSTRAINT no_home CHECK (name <> 'home') NOT VALID`),
  );
  await recycling.release(used);
  assert.deepEqual(await exists(used.name), { database: false, row: undefined });
});

test('a reset that leaves a different state (DDL it cannot undo) drops the sandbox', async () => {
  const used = await recycling.acquire(scenario, 'test:recycle-ddl');
  await withClient(used.adminUrl, (c) => c.query(`ALTER TABLE items ADD COLUMN note text`));
  await recycling.release(used);
  assert.deepEqual(await exists(used.name), { database: false, row: undefined });
});

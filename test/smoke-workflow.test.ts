import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createSmokeActivities } from '../activities/smoke-activities.ts';
import { temporalAddress } from '../config/environment.ts';
import { withClient } from '../infra/control-database.ts';
import { smokeWorkflow } from '../workflows/smoke-workflow.ts';
import { controlReady, env, temporalClient, workflowBundle } from './helpers/stack.ts';

let controlUrl: string;
before(async () => {
  controlUrl = await controlReady();
});

test('a workflow on the real Temporal dev server runs an activity that writes to the real Postgres', async () => {
  const taskQueue = `test-smoke-${randomUUID()}`;
  const connection = await NativeConnection.connect({ address: temporalAddress(env) });
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle: await workflowBundle(),
    activities: createSmokeActivities(controlUrl),
  });
  const { client, connection: clientConnection } = await temporalClient();
  const id = `smoke-${randomUUID()}`;
  try {
    const count = await worker.runUntil(
      client.workflow.execute(smokeWorkflow, { taskQueue, workflowId: id, args: [id] }),
    );
    assert.ok(count >= 1);
    const row = await withClient(controlUrl, (c) => c.query('SELECT message FROM smoke_checks WHERE id = $1', [id]));
    assert.equal(row.rows[0]?.message, `smoke check ${id}`);
    const described = await client.workflow.getHandle(id).describe();
    assert.equal(described.status.name, 'COMPLETED');
  } finally {
    await clientConnection.close();
    await connection.close();
  }
});

after(() => undefined);

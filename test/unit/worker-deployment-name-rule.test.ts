import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readEnvironment } from '../../config/environment.ts';

// docker/compose.yaml passes `TBT_WORKER_DEPLOYMENT_NAME: ${TBT_WORKER_DEPLOYMENT_NAME:-}` to every worker: unset on
// the host arrives as an empty string, and the compose stack's setup once refused to start on it.
test('TBT_WORKER_DEPLOYMENT_NAME: empty is unset (unversioned), a name is kept, a bad one refused', () => {
  assert.equal(readEnvironment({ TBT_WORKER_DEPLOYMENT_NAME: '' }).TBT_WORKER_DEPLOYMENT_NAME, undefined);
  assert.equal(readEnvironment({}).TBT_WORKER_DEPLOYMENT_NAME, undefined);
  assert.equal(readEnvironment({ TBT_WORKER_DEPLOYMENT_NAME: 'tbt-prod' }).TBT_WORKER_DEPLOYMENT_NAME, 'tbt-prod');
  for (const bad of [' ', '-lead', 'a/b', 'x'.repeat(64)])
    assert.throws(
      () => readEnvironment({ TBT_WORKER_DEPLOYMENT_NAME: bad }),
      /environment variable TBT_WORKER_DEPLOYMENT_NAME: /,
      bad,
    );
});

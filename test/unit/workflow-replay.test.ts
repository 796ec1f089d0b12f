import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { repoRoot } from '../../config/environment.ts';
import { workflowBundle } from '../helpers/workflow-test-env.ts';

/**
 * Replays recorded histories (test/fixtures/histories, written by test/helpers/record-histories.ts) against
 * today's workflow code: a change of command order that running workflows would hit fails here with a
 * nondeterminism error. `v1/` holds histories recorded before the sharded runner and the concurrency slots;
 * they replay through the `patched()` branches. Re-record the top-level files after an intended, patched change.
 */

const root = path.join(repoRoot, 'test', 'fixtures', 'histories');
const files = fs
  .readdirSync(root, { recursive: true, encoding: 'utf8' })
  .filter((f) => f.endsWith('.json'))
  .sort();

test('recorded histories exist (a campaign, a probe, a training step, an evaluation; old and current)', () => {
  for (const name of ['campaign', 'probe', 'training-step', 'evaluation'])
    for (const dir of ['', 'v1/']) assert.ok(files.includes(`${dir}${name}.json`), `${dir}${name}.json missing`);
});

for (const file of files) {
  test(`replays ${file}`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(root, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `replay-${file}`);
  });
}

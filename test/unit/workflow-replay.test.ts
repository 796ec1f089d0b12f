import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { repoRoot } from '../../config/environment.ts';
import { prebuiltWorkflowBundle, writeWorkflowBundle } from '../../infra/workflow-bundle.ts';
import { workflowSourceFingerprint } from '../../infra/workflow-bundle-sources.ts';
import { testTempDir } from '../helpers/temp-dir.ts';
import { workflowBundle } from '../helpers/workflow-test-env.ts';

/**
 * Replays recorded histories (test/fixtures/histories, written by test/helpers/record-histories.ts) against
 * today's workflow code: a change of command order that running workflows would hit fails here with a
 * nondeterminism error. `v1/` holds histories recorded before the sharded runner and the concurrency slots, `v2/`
 * a probe, an evaluation and a shard recorded before shards ran as lanes of one bound, and campaign runs recorded
 * before the learner was released outside training, `v3/` every run recorded before evaluations paused, stages
 * planned a history budget, queues were watched and a step's trained batch recorded; they replay through the
 * `patched()` branches. The top-level
 * files hold every run of a campaign's continue-as-new chain and each path a running campaign can be on (paused,
 * retried after an outage, stopped, failed), a scheduled evaluation, a multi-node step, overlapped steps
 * (`max_staleness` 1: a step and a campaign's chain) and a step in the epoch task order. Re-record the top-level
 * files after an intended, patched change; keep the old ones under `v<n>/` when running workflows may still hold
 * them.
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

/** Every run of the campaign's continue-as-new chain, and each path a running campaign can be on at a deploy. */
const chainRuns = [
  'campaign', // ingest, probe, evaluation before
  'campaign-step-1',
  'campaign-step-2',
  'campaign-report', // evaluation after, report
  'campaign-paused', // paused and resumed by Updates, then step 1
  'campaign-paused-step-2',
  'campaign-paused-report',
  'campaign-infra-paused', // a stage paused by an infrastructure failure, retried by itself
  'campaign-infra-paused-step-2',
  'campaign-infra-paused-report',
  'campaign-stopped', // stopped before training: the report of a stopped campaign
  'campaign-failed', // bad input: the clean-up that releases the learner
  'scheduled-evaluation',
  'training-step-multi-node',
];

test('every run of the continue-as-new chain and every campaign path has a recorded history', () => {
  const missing = chainRuns.filter((name) => !files.includes(`${name}.json`));
  assert.deepEqual(missing, [], `record them: tsx test/helpers/record-histories.ts <dir> (see its header)`);
  // A later run of the chain starts from the continued state, not from ingest.
  for (const name of ['campaign-step-1', 'campaign-step-2', 'campaign-report']) {
    const history = JSON.parse(fs.readFileSync(path.join(root, `${name}.json`), 'utf8')) as {
      events: { workflowExecutionStartedEventAttributes?: { continuedExecutionRunId?: string } }[];
    };
    assert.ok(history.events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId, name);
  }
});

for (const file of files) {
  test(`replays ${file}`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(root, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `replay-${file}`);
  });
}

/** A two-file workflow tree: what the pre-built bundle's freshness check hashes, and what it leaves out. */
function workflowTree(): { entry: string; dir: string } {
  const dir = testTempDir('tbt-workflow-tree-');
  fs.mkdirSync(path.join(dir, 'workflows'));
  fs.mkdirSync(path.join(dir, 'core'));
  const write = (file: string, text: string) => fs.writeFileSync(path.join(dir, file), text);
  write(
    'workflows/index.ts',
    "import type { Shape } from './shape.ts';\nexport { hello } from './hello.ts';\nexport type { Shape };\n",
  );
  write(
    'workflows/hello.ts',
    "import { sleep } from '@temporalio/workflow';\nimport { greet } from '../core/greet.ts';\n",
  );
  write('workflows/shape.ts', 'export interface Shape { a: number }\n');
  write('core/greet.ts', "export const greet = 'hi';\n");
  return { entry: path.join(dir, 'workflows', 'index.ts'), dir };
}

test('the source fingerprint follows runtime imports (not type-only ones) and names the SDK version', () => {
  const { entry, dir } = workflowTree();
  const print = workflowSourceFingerprint(entry);
  const files = print.files.map((f) => path.relative(dir, f));
  assert.deepEqual(files, ['core/greet.ts', 'workflows/hello.ts', 'workflows/index.ts']);
  assert.match(print.packages['@temporalio/workflow'] ?? '', /^\d+\.\d+\.\d+/);
  fs.appendFileSync(path.join(dir, 'workflows', 'shape.ts'), '// a type-only file: not in the bundle\n');
  assert.equal(workflowSourceFingerprint(entry).hash, print.hash);
  fs.appendFileSync(path.join(dir, 'core', 'greet.ts'), "export const bye = 'bye';\n");
  assert.notEqual(workflowSourceFingerprint(entry).hash, print.hash);
});

test('a pre-built bundle is used while its sources are unchanged; an edited source or bundle makes it stale', () => {
  const { entry, dir } = workflowTree();
  const out = path.join(dir, 'bundle');
  assert.equal(prebuiltWorkflowBundle(out, entry).state, 'missing');
  const manifest = writeWorkflowBundle(out, 'globalThis.x = 1;\n', entry);
  assert.match(manifest.buildId, /^[0-9a-f]{16}$/);
  const fresh = prebuiltWorkflowBundle(out, entry);
  assert.equal(fresh.state, 'fresh');
  assert.equal(fresh.state === 'fresh' && fs.readFileSync(fresh.codePath, 'utf8'), 'globalThis.x = 1;\n');
  fs.appendFileSync(path.join(dir, 'workflows', 'hello.ts'), 'export const changed = 1;\n');
  const stale = prebuiltWorkflowBundle(out, entry);
  assert.equal(stale.state, 'stale');
  assert.match(stale.state === 'stale' ? stale.reason : '', /workflows\/hello\.ts|sources changed/);
  writeWorkflowBundle(out, 'globalThis.x = 2;\n', entry);
  assert.equal(prebuiltWorkflowBundle(out, entry).state, 'fresh');
  fs.appendFileSync(path.join(out, 'workflow-bundle.js'), '// edited by hand\n');
  const edited = prebuiltWorkflowBundle(out, entry);
  assert.equal(edited.state, 'stale');
  assert.match(edited.state === 'stale' ? edited.reason : '', /build id/);
});

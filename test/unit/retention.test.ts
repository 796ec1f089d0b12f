import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { collectGarbage, pruneLearnerFolder } from '../../infra/retention.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

function touch(file: string, bytes = 10): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, 'x'.repeat(bytes));
}

test('finding 16: retention keeps the last K exports, drops batches of committed steps, rotates big logs', () => {
  const state = testTempDir('tbt-gc-');
  try {
    const run = path.join(state, 'learners', 'c1');
    for (const s of [2, 3]) touch(path.join(run, 'checkpoints', `step-${s}`, '.metadata'));
    touch(path.join(run, 'checkpoints', 'step-4.tmp', '.metadata')); // a save in progress commits nothing
    for (const s of [1, 2, 3, 4]) touch(path.join(run, 'checkpoints', 'exports', `step-${s}`, 'model.safetensors'));
    for (const s of [1, 2, 3, 4]) touch(path.join(run, 'batches', `step-${s}.jsonl`));
    touch(path.join(state, 'workers', 'rollout.log'), 2000);
    touch(path.join(state, 'temporal', 'server.log'), 100);

    const dry = collectGarbage(state, { keepExports: 2, maxLogBytes: 1000 }, true);
    assert.equal(dry.removed.length, 5);
    assert.ok(fs.existsSync(path.join(run, 'batches', 'step-1.jsonl')), 'a dry run removes nothing');

    const report = collectGarbage(state, { keepExports: 2, maxLogBytes: 1000 });
    assert.deepEqual(fs.readdirSync(path.join(run, 'batches')).sort(), ['step-4.jsonl'], 'batch 4 is not committed');
    assert.deepEqual(fs.readdirSync(path.join(run, 'checkpoints', 'exports')).sort(), ['step-3', 'step-4']);
    assert.ok(fs.existsSync(path.join(run, 'checkpoints', 'step-2')), 'checkpoints are the learner’s to prune');
    assert.equal(fs.statSync(path.join(state, 'workers', 'rollout.log')).size, 0);
    assert.equal(fs.statSync(path.join(state, 'workers', 'rollout.log.1')).size, 2000);
    assert.equal(fs.statSync(path.join(state, 'temporal', 'server.log')).size, 100, 'small logs stay');
    assert.equal(report.freedBytes, 5 * 10);
    assert.deepEqual(collectGarbage(state, { keepExports: 2, maxLogBytes: 1000 }).removed, [], 'idempotent');
  } finally {
    fs.rmSync(state, { recursive: true, force: true });
  }
});

test('a finished run may drop its step checkpoints too (keepCheckpoints), newest kept first', () => {
  const run = testTempDir('tbt-gc-done-');
  for (const s of [2, 10, 3]) touch(path.join(run, 'checkpoints', `step-${s}`, '.metadata'));
  for (const s of [9, 10]) touch(path.join(run, 'checkpoints', 'exports', `step-${s}`, 'model.safetensors'));
  const report = pruneLearnerFolder(run, { keepExports: 1, maxLogBytes: 1000, keepCheckpoints: 1 });
  assert.deepEqual(fs.readdirSync(path.join(run, 'checkpoints')).sort(), ['exports', 'step-10']);
  assert.deepEqual(fs.readdirSync(path.join(run, 'checkpoints', 'exports')), ['step-10']);
  assert.equal(report.freedBytes, 3 * 10);
  pruneLearnerFolder(run, { keepExports: 1, maxLogBytes: 1000, keepCheckpoints: 0 });
  assert.deepEqual(fs.readdirSync(path.join(run, 'checkpoints')), ['exports'], 'the trained export stays');
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asyncBenchLine, asyncBenchVariant, parseAsyncBenchArgs } from '../../bench/async-options.ts';

test('bench:async parses its modes and workload and refuses what it cannot run', () => {
  assert.deepEqual(parseAsyncBenchArgs([], 'c.yaml'), {
    config: 'c.yaml',
    workload: 'default',
    modes: ['sync', 'async', 'partial'],
  });
  assert.deepEqual(parseAsyncBenchArgs(['--steps', '3', '--workload', 'rollouts', '--modes', 'sync,partial'], 'c'), {
    steps: 3,
    config: 'c',
    workload: 'rollouts',
    modes: ['sync', 'partial'],
  });
  assert.throws(() => parseAsyncBenchArgs(['--workload', 'huge'], 'c'), /--workload/);
  assert.throws(() => parseAsyncBenchArgs(['--modes', 'async,partial'], 'c'), /--modes/);
  assert.throws(() => parseAsyncBenchArgs(['--modes', 'sync,fast'], 'c'), /--modes/);
  assert.throws(() => parseAsyncBenchArgs(['--steps', '0'], 'c'), /--steps/);
});

test('each mode sets staleness and partial rollouts; the rollouts workload slows sampling', () => {
  const base = () => ({
    name: 'bench-async',
    learner: {},
    training: { concurrency: 8, max_staleness: 1 } as Record<string, unknown>,
    episode: { limits: { max_tokens_per_turn: 64 } } as Record<string, unknown>,
  });
  const sync = base();
  asyncBenchVariant(sync, 'sync', 'default', 5);
  assert.deepEqual(sync.training, { concurrency: 8, max_staleness: 0, partial_rollouts: false, steps: 5 });
  assert.equal(sync.name, 'bench-async-sync');
  const partial = base();
  asyncBenchVariant(partial, 'partial', 'rollouts', 5);
  assert.equal(partial.name, 'bench-async-rollouts-partial');
  assert.deepEqual(partial.training, { concurrency: 2, max_staleness: 1, partial_rollouts: true, steps: 5 });
  assert.deepEqual(partial.episode.limits, { max_tokens_per_turn: 128 });
});

test('the last line names every mode, na for one not run', () => {
  assert.equal(
    asyncBenchLine({ steps: 8, minutes: { sync: 16.9, async: 8.9, partial: 8 }, meanLag: 0.83, maxLag: 1 }),
    'async: steps=8 sync_minutes=16.9 async_minutes=8.9 partial_minutes=8.0 speedup=1.90 partial_speedup=2.11 ' +
      'mean_lag=0.83 max_lag=1',
  );
  assert.match(asyncBenchLine({ steps: 2, minutes: { sync: 4 }, meanLag: 0, maxLag: 0 }), /partial_minutes=na .*=na/);
});

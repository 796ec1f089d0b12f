import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterBootstrapInterval, familyClusteredInterval } from '../../core/family-bootstrap.ts';
import { pairedComparison, type TaskOutcome } from '../../core/metrics.ts';
import { taskFamily } from '../../core/seeded-choice.ts';

/** The family-clustered paired bootstrap against the task-level one it sits beside. */

const options = { resamples: 2000, seed: 7 };
const width = (i: [number, number]) => i[1] - i[0];

/** n tasks per family; before c = 0 of 3, after c from `after(family, instance)`. */
function outcomes(families: number, n: number, after: (f: number, i: number) => number) {
  const a: TaskOutcome[] = [];
  const b: TaskOutcome[] = [];
  for (let f = 0; f < families; f++)
    for (let i = 0; i < n; i++) {
      a.push({ uid: `s/fam${f}-${i}`, domain: 's', n: 3, c: 0 });
      b.push({ uid: `s/fam${f}-${i}`, domain: 's', n: 3, c: after(f, i) });
    }
  return pairedComparison(a, b, options);
}

test('one task per family: the family interval is the task-level interval, draw for draw', () => {
  const a = [0, 1, 2, 3, 0, 3, 1, 2, 2].map((c, i) => ({ uid: `suite/task-${'abcdefghi'[i]}`, domain: 'd', n: 3, c }));
  const b = [3, 1, 0, 3, 2, 3, 3, 1, 2].map((c, i) => ({ ...a[i]!, c }));
  const paired = pairedComparison(a, b, options);
  const family = familyClusteredInterval(paired.per_task, taskFamily, options);
  assert.equal(family.families, a.length);
  assert.deepEqual(family.interval, paired.pass_at_1.interval);
});

test('families that move together: the family interval is wider on both sides', () => {
  // Half the families go 0 -> 3 on every instance, half stay at 0: tasks look like 24 independent coin flips.
  const paired = outcomes(4, 6, (f) => (f < 2 ? 3 : 0));
  const family = familyClusteredInterval(paired.per_task, taskFamily, options);
  assert.equal(family.families, 4);
  assert.ok(family.interval[0] < paired.pass_at_1.interval[0], `${family.interval} vs ${paired.pass_at_1.interval}`);
  assert.ok(family.interval[1] > paired.pass_at_1.interval[1], `${family.interval} vs ${paired.pass_at_1.interval}`);
  // Four draws of unchanged families happen 1 time in 16, more often than the 2.5% tail.
  assert.deepEqual(family.interval, [0, 1]);
});

test('families whose instances cancel out: the family interval is narrower', () => {
  // Every family has as many instances that gain as instances that lose: each family's mean is the same.
  const paired = outcomes(5, 4, (_, i) => (i % 2 === 0 ? 3 : 0));
  const family = familyClusteredInterval(paired.per_task, taskFamily, options);
  assert.ok(width(paired.pass_at_1.interval) > 0.2, `task-level ${paired.pass_at_1.interval}`);
  assert.deepEqual(family.interval, [0.5, 0.5]);
});

test('equal-size families: only each family total matters, not how it splits over instances', () => {
  const spread = [
    [3, 3, 0, 0],
    [1, 1, 1, 1],
    [0, 0, 0, 0],
    [3, 0, 3, 3],
    [2, 2, 2, 0],
    [3, 3, 3, 0],
  ];
  const even = [
    [2, 2, 1, 1],
    [2, 2, 0, 0],
    [0, 0, 0, 0],
    [3, 2, 2, 2],
    [3, 1, 1, 1],
    [3, 2, 2, 2],
  ];
  const one = outcomes(6, 4, (f, i) => spread[f]![i]!);
  const other = outcomes(6, 4, (f, i) => even[f]![i]!);
  assert.deepEqual(
    familyClusteredInterval(one.per_task, taskFamily, options).interval.map((x) => x.toFixed(12)),
    familyClusteredInterval(other.per_task, taskFamily, options).interval.map((x) => x.toFixed(12)),
  );
  assert.notDeepEqual(one.pass_at_1.interval, other.pass_at_1.interval, 'the task-level interval does see it');
});

test('cluster bootstrap: weighted by task count, seeded, and rejects empty or malformed clusters', () => {
  // A family of 9 tasks all +1 and one of 1 task at 0: a resample's mean is 0, 0.9 or 1, and 0.9 in half of them
  // (a mean of family means would give 0.5 there).
  const lopsided = [
    { sum: 9, count: 9 },
    { sum: 0, count: 1 },
  ];
  assert.deepEqual(clusterBootstrapInterval(lopsided, options), [0, 1]);
  assert.deepEqual(clusterBootstrapInterval(lopsided, { ...options, level: 0.2 }), [0.9, 0.9]);
  const clusters = [0.2, -0.1, 0.7, 0.4, 0, 0.9].map((sum) => ({ sum, count: 2 }));
  assert.deepEqual(clusterBootstrapInterval(clusters, options), clusterBootstrapInterval(clusters, options));
  assert.notDeepEqual(clusterBootstrapInterval(clusters, options), clusterBootstrapInterval(clusters, { seed: 8 }));
  assert.throws(() => clusterBootstrapInterval([]), /zero clusters/);
  assert.throws(() => clusterBootstrapInterval([{ sum: 1, count: 0 }]), /cluster 0: .*count >= 1/);
  assert.throws(() => clusterBootstrapInterval([{ sum: 1, count: 1 }], { resamples: 0 }), /resamples/);
});

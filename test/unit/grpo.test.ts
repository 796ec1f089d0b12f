import assert from 'node:assert/strict';
import { test } from 'node:test';
import { groupAdvantages, isZeroVariance } from '../../core/grpo.ts';
import { familyStepTaskOrder, stepTaskOrder, taskFamily } from '../../core/seeded-choice.ts';

test('GRPO advantages: c successes in 8 give (1-c/8)/std and -(c/8)/std with the unbiased std', () => {
  const rewards = [1, 1, 1, 0, 0, 0, 0, 0];
  const std = Math.sqrt((3 * (5 / 8) ** 2 + 5 * (3 / 8) ** 2) / 7);
  const a = groupAdvantages(rewards);
  assert.ok(Math.abs(a[0]! - (1 - 3 / 8) / (std + 1e-6)) < 1e-12);
  assert.ok(Math.abs(a[7]! + 3 / 8 / (std + 1e-6)) < 1e-12);
  assert.ok(Math.abs(a.reduce((x, y) => x + y, 0)) < 1e-12);
});

test(
  'Dr. GRPO switch centres without dividing by std; a group of one has mean 0 and std 1; equal rewards give ' + 'zeros',
  () => {
    assert.deepEqual(groupAdvantages([1, 0, 0, 0], false), [0.75, -0.25, -0.25, -0.25]);
    assert.deepEqual(groupAdvantages([1]), [1 / (1 + 1e-6)]);
    assert.deepEqual(groupAdvantages([1, 1, 1]), [0, 0, 0]);
    assert.equal(isZeroVariance([0, 0, 0]), true);
    assert.equal(isZeroVariance([0, 1, 0]), false);
  },
);

test('step task order depends on seed and step only, never on the pool input order', () => {
  const pool = Array.from({ length: 20 }, (_, i) => `t${i}`);
  const a = stepTaskOrder(pool, 42, 3);
  assert.deepEqual(stepTaskOrder([...pool].reverse(), 42, 3), a);
  assert.notDeepEqual(stepTaskOrder(pool, 42, 4), a);
  assert.notDeepEqual(stepTaskOrder(pool, 7, 3), a);
  assert.deepEqual([...a].sort(), [...pool].sort());
});

test('by-family order: every family once before any twice, the lead rotates by stride, and nothing is lost', () => {
  const families = ['library/lend', 'library/add', 'parking/park', 'todo/add', 'inventory/set'];
  const pool = families.flatMap((f) => [0, 2, 4, 6].map((i) => `tiny/${f}-${i}`));
  assert.equal(taskFamily('tiny/library/lend-12'), 'tiny/library/lend');
  assert.equal(taskFamily('task_7'), 'task');
  assert.equal(taskFamily('42'), '42');
  const leads: string[] = [];
  for (let step = 1; step <= 5; step++) {
    const order = familyStepTaskOrder(pool, 42, step, 2);
    assert.deepEqual([...order].sort(), [...pool].sort(), `step ${step} keeps every task once`);
    for (let round = 0; round < 4; round++) {
      const slice = order.slice(round * 5, round * 5 + 5).map(taskFamily);
      assert.equal(new Set(slice).size, 5, `step ${step} round ${round} has one task of each family`);
    }
    assert.deepEqual(familyStepTaskOrder([...pool].reverse(), 42, step, 2), order);
    leads.push(...order.slice(0, 2).map(taskFamily));
  }
  // 5 steps x stride 2 over 5 families: each family leads a step's first two draws exactly twice.
  for (const f of families) assert.equal(leads.filter((l) => l === `tiny/${f}`).length, 2, f);
  const uneven = [...pool.slice(0, 3), 'tiny/solo-1'];
  assert.deepEqual([...familyStepTaskOrder(uneven, 1, 1, 1)].sort(), [...uneven].sort());
});

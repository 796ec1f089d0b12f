import assert from 'node:assert/strict';
import { test } from 'node:test';
import { epochTaskOrder, epochTaskWindow, firstTaskCursor, type TaskCursor } from '../../core/epoch-task-order.ts';
import { stepTaskOrder } from '../../core/seeded-choice.ts';

/**
 * The epoch order (`training.task_order: epoch`, core/epoch-task-order.ts): one seeded shuffle per epoch, walked
 * by the steps through a cursor, a step crossing into the next epoch without running a task twice, and the same
 * order again from the cursor after a resume.
 */

const pool = Array.from({ length: 11 }, (_, i) => `suite/task-${i}`);

/** Draws `counts[i]` tasks in step i, as the step workflow does: the front of each step's window. */
function walk(tasks: string[], seed: number, counts: number[], size: number, from: TaskCursor = firstTaskCursor) {
  const steps: string[][] = [];
  let cursor = from;
  for (const count of counts) {
    const window = epochTaskWindow(tasks, seed, cursor, size);
    const drawn = Math.min(count, window.uids.length);
    steps.push(window.uids.slice(0, drawn));
    if (drawn > 0) cursor = window.cursors[drawn - 1]!;
  }
  return { steps, cursor };
}

test('an epoch is a permutation of the pool, the same for the same seed and epoch whatever the input order', () => {
  const order = epochTaskOrder(pool, 42, 1);
  assert.deepEqual([...order].sort(), [...pool].sort());
  assert.deepEqual(epochTaskOrder([...pool].reverse(), 42, 1), order);
  assert.deepEqual(epochTaskOrder([...pool, pool[3]!], 42, 1), order, 'a uid listed twice counts once');
  assert.notDeepEqual(epochTaskOrder(pool, 42, 2), order, 'every epoch is shuffled anew');
  assert.notDeepEqual(epochTaskOrder(pool, 7, 1), order, 'the seed decides the shuffle');
});

test('the steps walk through the epoch: every task once, in the epoch order, replacements included', () => {
  // 3 groups per step and up to 2 replacements: steps draw 3, 5, 3 tasks = the 11 tasks of epoch 1.
  const { steps, cursor } = walk(pool, 42, [3, 5, 3], 5);
  assert.deepEqual(steps.flat(), epochTaskOrder(pool, 42, 1));
  assert.deepEqual(cursor, { epoch: 1, last: epochTaskOrder(pool, 42, 1).at(-1) });
  // The next step starts epoch 2 at its front.
  assert.deepEqual(epochTaskWindow(pool, 42, cursor, 3).uids, epochTaskOrder(pool, 42, 2).slice(0, 3));
});

test("where an epoch ends mid-step the step goes on into the next one's order, never running a task twice", () => {
  for (let seed = 1; seed <= 40; seed++) {
    const { steps } = walk(pool, seed, [4, 4, 4, 4, 4, 4, 4, 4], 4);
    for (const s of steps) assert.equal(new Set(s).size, s.length, `seed ${seed}: a step ran a task twice`);
    // Draw counts stay level: no task is ever two visits ahead of another; 32 draws of 11 tasks: 2 or 3 each.
    const counts = new Map<string, number>();
    for (const uid of steps.flat()) counts.set(uid, (counts.get(uid) ?? 0) + 1);
    assert.deepEqual([...new Set(counts.values())].sort(), [2, 3], `seed ${seed}: ${[...counts.values()]}`);
  }
});

test("a task the step held already from the epoch before is deferred to the next step's front", () => {
  const tasks = ['a', 'b', 'c', 'd'];
  // Find a seed whose epoch 2 opens with a task that step 2 (the last of epoch 1 plus 2 of epoch 2) holds.
  const seed = Array.from({ length: 200 }, (_, i) => i).find((s) => {
    const e1 = epochTaskOrder(tasks, s, 1);
    return epochTaskOrder(tasks, s, 2)[0] === e1[3];
  })!;
  assert.ok(seed !== undefined, 'precondition: such a seed exists');
  const [e1, e2] = [epochTaskOrder(tasks, seed, 1), epochTaskOrder(tasks, seed, 2)];
  const { steps, cursor } = walk(tasks, seed, [3, 3], 3);
  assert.deepEqual(steps[0], e1.slice(0, 3));
  assert.deepEqual(steps[1], [e1[3], e2[1], e2[2]], "epoch 2's first task is passed over: step 2 has it");
  assert.deepEqual(cursor, { epoch: 2, last: e2[2], deferred: [e2[0]] });
  assert.deepEqual(epochTaskWindow(tasks, seed, cursor, 3).uids, [
    e2[0],
    e2[3],
    ...epochTaskOrder(tasks, seed, 3).slice(0, 1),
  ]);
});

test('a resumed campaign goes on from its cursor (plain JSON) exactly as one that never stopped', () => {
  const counts = [3, 5, 4, 3, 5, 2, 5, 4];
  const straight = walk(pool, 9, counts, 5);
  const before = walk(pool, 9, counts.slice(0, 3), 5);
  const resumed = walk(pool, 9, counts.slice(3), 5, JSON.parse(JSON.stringify(before.cursor)) as TaskCursor);
  assert.deepEqual([...before.steps, ...resumed.steps], straight.steps);
  assert.deepEqual(resumed.cursor, straight.cursor);
});

test("a task dropped from the pool leaves the others' order; its cursor still places the walk", () => {
  const { steps, cursor } = walk(pool, 42, [3], 3);
  const dropped = steps[0]!.at(-1)!;
  const rest = pool.filter((uid) => uid !== dropped);
  assert.deepEqual(
    epochTaskOrder(rest, 42, 1),
    epochTaskOrder(pool, 42, 1).filter((uid) => uid !== dropped),
  );
  assert.deepEqual(epochTaskWindow(rest, 42, cursor, 3).uids, epochTaskOrder(pool, 42, 1).slice(3, 6));
});

test('a pool smaller than the window gives each task once; an empty pool gives none', () => {
  assert.deepEqual([...epochTaskWindow(['x', 'y'], 1, firstTaskCursor, 5).uids].sort(), ['x', 'y']);
  assert.deepEqual(epochTaskWindow([], 1, firstTaskCursor, 5), { uids: [], cursors: [] });
});

test('unlike the per-step seeded order, consecutive steps never repeat a task within an epoch', () => {
  // The per-step order draws each step's tasks afresh: some task comes back before the pool is through.
  const seeded = [1, 2, 3].flatMap((step) => stepTaskOrder(pool, 42, step).slice(0, 3));
  assert.ok(new Set(seeded).size < seeded.length, 'precondition: the per-step order repeats within 9 draws');
  const { steps } = walk(pool, 42, [3, 3, 3], 3);
  assert.equal(new Set(steps.flat()).size, 9);
});

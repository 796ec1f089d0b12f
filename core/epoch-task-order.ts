import { cyrb53 } from './seeded-choice.ts';

/**
 * `training.task_order: epoch`, the reference's order: its data loader shuffles the pool once per pass (epoch) with
 * the run's seed and hands tasks out one at a time, zero-variance replacements included, so a step may end one
 * epoch and begin the next. Here the tasks form one stream, epoch 1's order, then epoch 2's, ..., each a ranking of
 * the pool by a hash of (seed, epoch, uid): the same seed and epoch give the same order on every machine, whatever
 * the pool's input order, and a task dropped from the pool leaves the others' order as it was. Each step draws the
 * next tasks of the stream; the campaign keeps the cursor (plain JSON) in its state, so a resumed campaign goes on
 * where it was. Pure JavaScript: workflow code runs it.
 */

/** Where a campaign is in the stream. */
export interface TaskCursor {
  /** Epoch being walked, from 1. */
  epoch: number;
  /** The last task drawn from this epoch's order (absent: none yet). */
  last?: string;
  /**
   * Tasks of this epoch's order before `last` that a step passed over because it held them already from the epoch
   * before (a step never runs one task twice: its episode ids would collide); the next step draws them first.
   */
  deferred?: string[];
}

export const firstTaskCursor: TaskCursor = { epoch: 1 };

/** A step's candidate tasks in stream order, and `cursors[i]`: the cursor once `uids[0..i]` are drawn. */
export interface TaskWindow {
  uids: string[];
  cursors: TaskCursor[];
}

type Ranked = readonly [number, string];

const ranked = (seed: number, epoch: number, uid: string): Ranked => [
  cyrb53(`epoch\u0000${epoch}\u0000${uid}`, seed),
  uid,
];

function compare([a, ua]: Ranked, [b, ub]: Ranked): number {
  return a - b || (ua < ub ? -1 : ua > ub ? 1 : 0);
}

/** One epoch's order of the pool (a uid listed twice counts once). */
export function epochTaskOrder(pool: readonly string[], seed: number, epoch: number): string[] {
  return [...new Set(pool)]
    .map((uid) => ranked(seed, epoch, uid))
    .sort(compare)
    .map(([, uid]) => uid);
}

/**
 * The next `size` distinct tasks after `cursor` (fewer when the pool is smaller): the deferred ones first, then
 * the rest of the cursor's epoch, then the next epoch's order, passing over (and deferring) a task the window
 * holds already. The pool may have lost tasks since the cursor was made: the ones gone are left out.
 */
export function epochTaskWindow(pool: readonly string[], seed: number, cursor: TaskCursor, size: number): TaskWindow {
  const members = new Set(pool);
  const want = Math.min(size, members.size);
  const window: TaskWindow = { uids: [], cursors: [] };
  const owed = (cursor.deferred ?? []).filter((uid) => members.has(uid));
  for (let i = 0; i < owed.length && window.uids.length < want; i++) {
    window.uids.push(owed[i]!);
    window.cursors.push(withDeferred({ epoch: cursor.epoch, last: cursor.last }, owed.slice(i + 1)));
  }
  // Every task is in the window by the end of the next epoch: two epochs always fill it.
  for (let epoch = cursor.epoch; window.uids.length < want && epoch <= cursor.epoch + 1; epoch++) {
    const after = epoch === cursor.epoch && cursor.last !== undefined ? ranked(seed, epoch, cursor.last) : undefined;
    const passed: string[] = [];
    for (const uid of epochTaskOrder(pool, seed, epoch)) {
      if (window.uids.length >= want) break;
      if (after && compare(ranked(seed, epoch, uid), after) <= 0) continue;
      if (window.uids.includes(uid)) {
        passed.push(uid);
        continue;
      }
      window.uids.push(uid);
      window.cursors.push(withDeferred({ epoch, last: uid }, passed));
    }
  }
  return window;
}

function withDeferred(cursor: TaskCursor, deferred: string[]): TaskCursor {
  const plain = cursor.last === undefined ? { epoch: cursor.epoch } : { epoch: cursor.epoch, last: cursor.last };
  return deferred.length ? { ...plain, deferred: [...deferred] } : plain;
}

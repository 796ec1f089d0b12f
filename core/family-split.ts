import { compareStrings } from './difficulty.ts';
import { cyrb53, taskFamily } from './seeded-choice.ts';

/**
 * A train / held-out split by whole task families (the learning benchmark's `--split templates`): held-out tasks
 * come from families the policy never trains on, so a gain on them is transfer to new templates, not to new
 * arguments of known ones. Pure and deterministic: the same uids and seed give the same split in any input order.
 */

export interface FamilySplit {
  training: string[];
  heldOut: string[];
  trainingFamilies: string[];
  heldOutFamilies: string[];
}

/**
 * Families in a seeded hash order; each is held out when that brings the held-out task count closer to half of
 * all tasks. The first family always qualifies (two or more families), and no family can take the held-out side
 * to every task, so both sides are non-empty.
 */
export function familySplit(uids: readonly string[], seed: number, familyOf = taskFamily): FamilySplit {
  const members = new Map<string, string[]>();
  for (const uid of [...new Set(uids)].sort(compareStrings)) {
    const family = familyOf(uid);
    members.set(family, [...(members.get(family) ?? []), uid]);
  }
  if (members.size < 2)
    throw new RangeError(
      `a family split needs at least two task families, got ${members.size} in ${uids.length} tasks`,
    );
  // A salt of its own, so the held-out choice does not follow the by_family training order's cycle.
  const order = [...members.keys()]
    .map((family) => [cyrb53(`held-out\u0000${family}`, seed), family] as const)
    .sort(([a, fa], [b, fb]) => a - b || compareStrings(fa, fb))
    .map(([, family]) => family);
  const target = [...members.values()].reduce((s, m) => s + m.length, 0) / 2;
  const held = new Set<string>();
  let heldTasks = 0;
  for (const family of order) {
    const size = members.get(family)!.length;
    if (Math.abs(heldTasks + size - target) < Math.abs(heldTasks - target)) {
      held.add(family);
      heldTasks += size;
    }
  }
  const families = [...members.keys()].sort(compareStrings);
  const side = (wanted: boolean) => families.filter((f) => held.has(f) === wanted);
  return {
    training: side(false).flatMap((f) => members.get(f)!),
    heldOut: side(true).flatMap((f) => members.get(f)!),
    trainingFamilies: side(false),
    heldOutFamilies: side(true),
  };
}

/** Throws naming the families (and a task of each) that appear on both sides: training would see a held-out one. */
export function checkFamiliesDisjoint(
  training: readonly string[],
  heldOut: readonly string[],
  familyOf = taskFamily,
): void {
  const heldFamilies = new Set(heldOut.map(familyOf));
  const shared = new Map<string, string>();
  for (const uid of training) {
    const family = familyOf(uid);
    if (heldFamilies.has(family) && !shared.has(family)) shared.set(family, uid);
  }
  if (shared.size > 0) {
    const list = [...shared].map(([family, uid]) => `${family} (training task ${uid})`);
    throw new RangeError(
      `${shared.size} held-out famil${shared.size === 1 ? 'y is' : 'ies are'} also in training: ` +
        `${list.slice(0, 5).join(', ')}${list.length > 5 ? `, ... (${list.length} in all)` : ''}`,
    );
  }
}

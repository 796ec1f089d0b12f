/**
 * Deterministic task orders for a training step. The same seed, step and pool give the same order on every
 * replay and machine, whatever the pool's input order. Pure JavaScript (cyrb53) because workflow code may not
 * import Node's crypto.
 */

export function cyrb53(text: string, seed = 0): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/** The pool ranked by a hash of (seed, step, uid): `training.task_order: seeded`. */
export function stepTaskOrder(pool: string[], seed: number, step: number): string[] {
  return [...pool]
    .map((uid) => [cyrb53(`${step}\u0000${uid}`, seed), uid] as const)
    .sort(([a, ua], [b, ub]) => a - b || (ua < ub ? -1 : ua > ub ? 1 : 0))
    .map(([, uid]) => uid);
}

/** A task's family: its uid without a trailing instance number (`library/lend-3` -> `library/lend`). */
export function taskFamily(uid: string): string {
  return uid.replace(/[-_]?\d+$/, '') || uid;
}

/**
 * `training.task_order: by_family`: one task of every family before a second of any, so a step's groups and
 * its replacements cover as many families as they can. The families keep one seeded cycle for the whole run;
 * each step starts `stride` families after the previous one (stride = groups_per_step), so over the steps every
 * family leads a step's first draw about equally often. Within a family the tasks follow `stepTaskOrder`.
 */
export function familyStepTaskOrder(pool: string[], seed: number, step: number, stride: number): string[] {
  const members = new Map<string, string[]>();
  for (const uid of stepTaskOrder(pool, seed, step)) {
    const family = taskFamily(uid);
    const tasks = members.get(family);
    if (tasks) tasks.push(uid);
    else members.set(family, [uid]);
  }
  const cycle = stepTaskOrder([...members.keys()], seed, 0);
  const start = ((step - 1) * stride) % cycle.length; // steps count from 1
  const families = [...cycle.slice(start), ...cycle.slice(0, start)].map((f) => members.get(f)!);
  const order: string[] = [];
  for (let depth = 0; order.length < pool.length; depth++)
    for (const tasks of families) if (depth < tasks.length) order.push(tasks[depth]!);
  return order;
}

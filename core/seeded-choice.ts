/**
 * Deterministic task order for a training step: the pool ranked by a hash of (seed, step, uid). The same
 * seed, step and pool give the same order on every replay and machine, whatever the pool's input order.
 * Pure JavaScript (cyrb53) because workflow code may not import Node's crypto.
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

export function stepTaskOrder(pool: string[], seed: number, step: number): string[] {
  return [...pool]
    .map((uid) => [cyrb53(`${step}\u0000${uid}`, seed), uid] as const)
    .sort(([a, ua], [b, ub]) => a - b || (ua < ub ? -1 : ua > ub ? 1 : 0))
    .map(([, uid]) => uid);
}

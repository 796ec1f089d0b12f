/**
 * GRPO advantages as the reference computes them (docs/reference-rules.md §4): within a group,
 * A_i = (r_i - mean) / (std + 1e-6) with the unbiased (n-1) std; a group of one has mean 0 and std 1.
 * `normalizeStd: false` gives Dr. GRPO's centred-only advantages.
 */

export const STD_EPSILON = 1e-6;

export function groupAdvantages(rewards: number[], normalizeStd = true): number[] {
  const n = rewards.length;
  if (n === 0) return [];
  const mean = n === 1 ? 0 : rewards.reduce((a, b) => a + b, 0) / n;
  const std = n === 1 ? 1 : Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / (n - 1));
  return rewards.map((r) => (normalizeStd ? (r - mean) / (std + STD_EPSILON) : r - mean));
}

/** A group whose rewards are all equal carries no GRPO signal. */
export function isZeroVariance(rewards: number[]): boolean {
  return rewards.every((r) => r === rewards[0]);
}

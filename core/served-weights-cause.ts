/**
 * How the cause of an episode that a policy server sampled with other weights starts (rollout/served-weights.ts):
 * the training step reads it to sync the servers again before it refills the episode.
 */
export const SERVED_WEIGHTS_MISMATCH = 'served weights mismatch';

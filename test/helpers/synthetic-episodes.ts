import { withClient } from '../../infra/control-database.ts';

/**
 * Training episodes without rollouts, for driving the learner directly (tests and bench:weight-sync): `count`
 * rows of `campaign`'s step `step` in the control database, each with a deterministic token trajectory (the
 * second half trained on) and alternating advantages, as the training-step workflow hands them to the learner.
 */
export async function insertSyntheticEpisodes(
  controlUrl: string,
  campaign: string,
  step: number,
  count: number,
  length = 24,
): Promise<{ episodeId: string; advantage: number }[]> {
  const items = Array.from({ length: count }, (_, i) => ({
    episodeId: `${campaign}/step-${step}/t#${i}`,
    advantage: i % 2 === 0 ? 1 : -1,
  }));
  await withClient(controlUrl, async (c) => {
    for (const [i, item] of items.entries()) {
      await c.query(
        `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, step, status, reward, ` +
          `record) VALUES ($1, 't', 's', 'sc', 'd', 'train', $2, $3, 'success', 1, $4) ON CONFLICT (id) DO NOTHING`,
        [item.episodeId, campaign, step, JSON.stringify({ trajectory: trajectory(step * 100 + i, length) })],
      );
    }
  });
  return items;
}

function trajectory(seed: number, length: number) {
  const tokenIds = Array.from({ length }, (_, i) => 100 + ((seed * 31 + i * 7) % 4000));
  const lossMask = tokenIds.map((_, i) => (i >= length / 2 ? 1 : 0));
  return { tokenIds, lossMask, logprobs: tokenIds.map(() => 0) };
}

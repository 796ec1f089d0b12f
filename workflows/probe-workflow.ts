import { patched, proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import type { KeyedEpisodesInput } from './keyed-episode-types.ts';
import { runShardedEpisodes } from './keyed-episodes.ts';
import { runKeyedEpisodesV1 } from './keyed-episodes-v1.ts';
import { bookkeepingOptions } from './activity-options.ts';

/**
 * Offline difficulty probing: n episodes per candidate with the base policy (sharded, keyed-episodes.ts), then
 * selection by Jeffreys bands (the same rules as `tbt prepare`) over the stored episodes of this probe.
 * Infrastructure errors are re-run (bounded, with backoff); what still fails counts as a system error, which
 * selection ignores.
 */

export interface ProbeInput extends Omit<KeyedEpisodesInput, 'idPrefix' | 'purpose'> {
  minCleanRuns: number;
  retainBands: string[];
}
export interface ProbeResult {
  pool: string[];
  bands: Record<string, number>;
  aggregates: string;
  episodes: number;
}

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('30 minutes', 5));

export async function probeWorkflow(input: ProbeInput): Promise<ProbeResult> {
  const idPrefix = `${input.campaignId}/probe`;
  const selectOptions = {
    campaignId: input.campaignId,
    minCleanRuns: input.minCleanRuns,
    retainBands: input.retainBands,
  };
  if (!patched('episode-shards')) {
    // A probe started before sharding: replay its recorded commands (keyed-episodes-v1.ts).
    const results = await runKeyedEpisodesV1({ ...input, idPrefix, purpose: 'probe' });
    const selection = await bookkeeping.selectPool({
      ...selectOptions,
      probeEpisodeIds: results.map((r) => r.final.id),
    });
    return { ...selection, episodes: results.reduce((a, r) => a + r.attempts, 0) };
  }
  const stage = await runShardedEpisodes({ ...input, idPrefix, purpose: 'probe' });
  const selection = await bookkeeping.selectPool({ ...selectOptions, idPrefix });
  return { ...selection, episodes: stage.episodes };
}

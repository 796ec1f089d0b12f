import { proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import { runKeyedEpisodes, type KeyedEpisodesInput } from './keyed-episodes.ts';
import { bookkeepingOptions } from './activity-options.ts';

/**
 * Offline difficulty probing: n episodes per candidate with the base policy, then selection by Jeffreys
 * bands (the same rules as `tbt prepare`). Infrastructure errors are re-run (bounded); what still fails
 * counts as a system error, which selection ignores.
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
  const results = await runKeyedEpisodes({ ...input, idPrefix: `${input.campaignId}/probe`, purpose: 'probe' });
  const selection = await bookkeeping.selectPool({
    campaignId: input.campaignId,
    probeEpisodeIds: results.map((r) => r.final.id),
    minCleanRuns: input.minCleanRuns,
    retainBands: input.retainBands,
  });
  return { ...selection, episodes: results.reduce((a, r) => a + r.attempts, 0) };
}

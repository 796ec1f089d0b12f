import { ApplicationFailure, continueAsNew, patched, proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import type { KeyedEpisodesInput } from './keyed-episode-types.ts';
import { runShardedEpisodesWaitingOutOutages, type OutageWaits, type StageResume } from './outage-waits.ts';
import { runKeyedEpisodesV1 } from './keyed-episodes-v1.ts';
import { bookkeepingOptions } from './activity-options.ts';
import { coverageGateFailureType } from './evaluation-workflow.ts';

/**
 * Offline difficulty probing: n episodes per candidate with the base policy (sharded, keyed-episodes.ts), then
 * selection by Jeffreys bands (the same rules as `tbt prepare`) over the stored episodes of this probe.
 * Infrastructure errors are re-run (bounded, with backoff), and the probe waits out an outage (`outageWaits`)
 * before selecting; what still fails counts as a system error, which selection ignores. A probe whose every key
 * still ends in an infrastructure error fails its coverage gate (infrastructure: the campaign pauses), rather than
 * selecting from nothing.
 */

export interface ProbeInput extends Omit<KeyedEpisodesInput, 'idPrefix' | 'purpose'> {
  minCleanRuns: number;
  retainBands: string[];
  /** Times the probe waits and runs its keys again while some still end in infrastructure errors. */
  outageWaits?: OutageWaits;
  /** Set by the probe itself when it continues as new part-way through its keys (outage-waits.ts). */
  stageResume?: StageResume;
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
  const { stageResume, ...stageInput } = input;
  const stage = await runShardedEpisodesWaitingOutOutages(
    { ...stageInput, idPrefix, purpose: 'probe' },
    input.outageWaits,
    {
      resume: stageResume,
      continueAsNew: (resume) => continueAsNew<typeof probeWorkflow>({ ...input, stageResume: resume }),
    },
  );
  // Probes that selected from an outage before this gate failed in selection (as bad input): replay keeps them so.
  if (stage.keys > 0 && stage.uncovered === stage.keys && patched('probe-outage-gate'))
    throw ApplicationFailure.nonRetryable(
      `coverage gate failed for the probe: all ${stage.keys} keys still end in infrastructure errors after ` +
        `${input.maxReruns} re-runs and ${input.outageWaits?.waits ?? 0} outage waits (e.g. ` +
        `${stage.uncoveredSamples.join('; ')}); nothing is selected`,
      coverageGateFailureType,
    );
  const selection = await bookkeeping.selectPool({ ...selectOptions, idPrefix });
  return { ...selection, episodes: stage.episodes };
}

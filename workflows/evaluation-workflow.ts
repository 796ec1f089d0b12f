import { ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import { runKeyedEpisodes, type KeyedEpisodesInput } from './keyed-episodes.ts';
import { bookkeepingOptions } from './activity-options.ts';

/**
 * Evaluation of one policy on tasks x repeats (`uid#rep` keys). Missing or infrastructure-errored keys are
 * re-run automatically (bounded); the coverage gate (every key exactly once, no infrastructure error)
 * must pass before any score is computed.
 */

export interface EvaluationInput extends Omit<KeyedEpisodesInput, 'idPrefix' | 'purpose'> {
  label: string;
  prices?: string;
}
export interface EvaluationResult {
  label: string;
  aggregate: string;
  summary: string;
  episodes: number;
  reruns: number;
}

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('30 minutes', 5));

export async function evaluationWorkflow(input: EvaluationInput): Promise<EvaluationResult> {
  const results = await runKeyedEpisodes({
    ...input,
    idPrefix: `${input.campaignId}/eval-${input.label}`,
    purpose: 'eval',
  });
  const uncovered = results.filter((r) => r.final.outcome === 'infrastructure_error');
  if (uncovered.length > 0) {
    throw ApplicationFailure.nonRetryable(
      `coverage gate failed for evaluation ${input.label}: ${uncovered.length} of ${results.length} keys still end in infrastructure errors after ${input.maxReruns} re-runs (e.g. ${uncovered
        .slice(0, 3)
        .map((r) => `${r.key}: ${r.final.cause}`)
        .join('; ')}); no score is reported`,
      'CoverageGate',
    );
  }
  const { aggregate, summary } = await bookkeeping.aggregateEvaluation({
    campaignId: input.campaignId,
    label: input.label,
    episodeIds: results.map((r) => r.final.id),
    uids: input.uids,
    repeats: input.repeats,
    prices: input.prices,
  });
  return {
    label: input.label,
    aggregate,
    summary,
    episodes: results.reduce((a, r) => a + r.attempts, 0),
    reruns: results.reduce((a, r) => a + r.attempts - 1, 0),
  };
}

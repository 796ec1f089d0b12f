import { ApplicationFailure, continueAsNew, patched, proxyActivities } from '@temporalio/workflow';
import type { CampaignActivities } from '../activities/campaign-activities.ts';
import type { KeyedEpisodesInput, TaskErrorTask } from './keyed-episode-types.ts';
import { runShardedEpisodesWaitingOutOutages, type OutageWaits, type StageResume } from './outage-waits.ts';
import { runKeyedEpisodesV1 } from './keyed-episodes-v1.ts';
import { bookkeepingOptions } from './activity-options.ts';

/**
 * Evaluation of one policy on tasks x repeats (`uid#rep` keys), sharded (keyed-episodes.ts). Infrastructure-
 * errored keys are re-run automatically (bounded, with backoff); the coverage gate (every key exactly once, no
 * infrastructure error) must pass before any score is computed. An evaluation outside a campaign may first wait
 * out an outage (`outageWaits`): it runs the keys again after a capped backoff (finished episodes are reused by id;
 * infrastructure-errored ones are played again under their ids). A campaign's evaluation waits none: the campaign
 * pauses instead, visibly. Keys ending in task errors are not re-run and are counted apart (`taskErrors`).
 * Aggregation reads the stored episodes of this evaluation by id prefix.
 */

export interface EvaluationInput extends Omit<KeyedEpisodesInput, 'idPrefix' | 'purpose'> {
  label: string;
  prices?: string;
  /**
   * Times the whole evaluation waits and runs again while keys still end in infrastructure errors, before the
   * coverage gate fails it; the waits double from `initialMs` up to `maxMs`. Default: none.
   */
  outageWaits?: OutageWaits;
  /** Set by the evaluation itself when it continues as new part-way through its keys (outage-waits.ts). */
  stageResume?: StageResume;
  /**
   * Keys that end in a task error (the task's own test code raised the same exception twice) are never re-run:
   * `list` (default) scores the rest and names them; `fail` fails the evaluation with them named, before scoring.
   */
  taskErrors?: 'list' | 'fail';
}
export interface EvaluationResult {
  label: string;
  aggregate: string;
  summary: string;
  episodes: number;
  reruns: number;
  /** Keys that ended in a task error, and each such task with its cause (absent: none). */
  taskErrors?: number;
  taskErrorTasks?: TaskErrorTask[];
}

const bookkeeping = proxyActivities<CampaignActivities>(bookkeepingOptions('30 minutes', 5));

/** The failure type of an evaluation whose keys still end in infrastructure errors after every re-run. */
export const coverageGateFailureType = 'CoverageGate';

function coverageGate(label: string, uncovered: number, keys: number, maxReruns: number, samples: string[]): void {
  if (uncovered === 0) return;
  throw ApplicationFailure.nonRetryable(
    `coverage gate failed for evaluation ${label}: ${uncovered} of ${keys} keys still end in infrastructure errors ` +
      `after ${maxReruns} re-runs (e.g. ${samples.join('; ')}); no score is reported`,
    coverageGateFailureType,
  );
}

/** The failure type of an evaluation with task errors when the config says they fail it. */
export const taskErrorGateFailureType = 'TaskErrors';

function taskErrorGate(
  input: EvaluationInput,
  stage: { keys: number; taskErrors?: number; taskErrorTasks?: TaskErrorTask[] },
) {
  if (!stage.taskErrors || input.taskErrors !== 'fail') return;
  const tasks = (stage.taskErrorTasks ?? []).map((t) => `${t.uid}: ${t.cause}`);
  throw ApplicationFailure.nonRetryable(
    `evaluation ${input.label}: ${stage.taskErrors} of ${stage.keys} keys end in task errors (the task's own test ` +
      `code raised the same exception twice; fix the tests or set task_errors: list). Tasks:\n${tasks.join('\n')}`,
    taskErrorGateFailureType,
  );
}

export async function evaluationWorkflow(input: EvaluationInput): Promise<EvaluationResult> {
  const idPrefix = `${input.campaignId}/eval-${input.label}`;
  const aggregateOptions = {
    campaignId: input.campaignId,
    label: input.label,
    uids: input.uids,
    repeats: input.repeats,
    prices: input.prices,
  };
  if (!patched('episode-shards')) {
    // An evaluation started before sharding: replay its recorded commands (keyed-episodes-v1.ts).
    const results = await runKeyedEpisodesV1({ ...input, idPrefix, purpose: 'eval' });
    const uncovered = results.filter((r) => r.final.outcome === 'infrastructure_error');
    const samples = uncovered.slice(0, 3).map((r) => `${r.key}: ${r.final.cause}`);
    coverageGate(input.label, uncovered.length, results.length, input.maxReruns, samples);
    const { aggregate, summary } = await bookkeeping.aggregateEvaluation({
      ...aggregateOptions,
      episodeIds: results.map((r) => r.final.id),
    });
    const episodes = results.reduce((a, r) => a + r.attempts, 0);
    return { label: input.label, aggregate, summary, episodes, reruns: episodes - results.length };
  }
  const { stageResume, ...stageInput } = input;
  const stage = await runShardedEpisodesWaitingOutOutages(
    { ...stageInput, idPrefix, purpose: 'eval' },
    input.outageWaits,
    {
      resume: stageResume,
      continueAsNew: (resume) => continueAsNew<typeof evaluationWorkflow>({ ...input, stageResume: resume }),
    },
  );
  coverageGate(input.label, stage.uncovered, stage.keys, input.maxReruns, stage.uncoveredSamples);
  taskErrorGate(input, stage);
  const { aggregate, summary } = await bookkeeping.aggregateEvaluation({ ...aggregateOptions, idPrefix });
  const { taskErrors, taskErrorTasks } = stage;
  return {
    label: input.label,
    aggregate,
    summary,
    episodes: stage.episodes,
    reruns: stage.reruns,
    ...(taskErrors ? { taskErrors, taskErrorTasks } : {}),
  };
}

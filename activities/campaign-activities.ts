import { currentActivity, heartbeating } from './activity-heartbeat.ts';
import { campaignTrainingOn } from './campaign-training-servers.ts';
import { withFailureMapping } from './temporal-failure.ts';
import { writeCampaignCosts, type CampaignCostsInput } from '../campaign-records/campaign-costs.ts';
import { keepCampaignFile } from '../campaign-records/campaign-files.ts';
import { writeCampaignReport, type CampaignReportInput } from '../campaign-records/campaign-report.ts';
import { writeCampaignManifest } from '../campaign-records/campaign-run-folder.ts';
import { aggregateEvaluation, type EvaluationAggregationInput } from '../campaign-records/evaluation-aggregation.ts';
import { trackEvaluation, trackOrWarn, trackStep, trackingAttempts } from '../campaign-records/experiment-tracking.ts';
import { latestCheckpoint } from '../campaign-records/latest-checkpoint.ts';
import { selectPool, type PoolSelectionInput } from '../campaign-records/pool-selection.ts';
import type { StepRecord } from '../campaign-records/step-record.ts';
import { latestStepRecord, saveStepRecord, stepRecordsInOrder } from '../campaign-records/step-records.ts';
import { stepsFile, writeStepsFile } from '../campaign-records/steps-file.ts';
import { trainedEpisodes, type TrainedEpisode } from '../campaign-records/trained-episodes.ts';
import { ingestCandidates, type CandidateIngestInput } from '../campaign-records/training-candidates.ts';

export type { StepRecord } from '../campaign-records/step-record.ts';

/**
 * Bookkeeping activities of a campaign (orchestrator queue): ingest candidates, select the pool from
 * probe episodes, record steps, aggregate evaluations and write the report. Selection, aggregation and
 * reporting run the same `tbt prepare` / `tbt eval aggregate` / `tbt report` commands users run
 * (campaign-records/ holds the work; these functions only hand it their inputs). Any bookkeeping worker may run
 * any of them: what a later stage reads is kept in the control database (campaign-records/campaign-files.ts),
 * and `stateDir` holds this worker's copies and the report.
 */

/**
 * Every bookkeeping activity heartbeats every 10 s while it runs, so a killed orchestrator worker is noticed
 * at the heartbeat timeout (1 minute, workflows/activity-options.ts) rather than at the end of its long
 * start-to-close limit. Called outside an activity (tests, tools), the functions just run.
 */
function withHeartbeats<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  // Errors become Temporal failures by our one mapping (activities/temporal-failure.ts).
  return withFailureMapping(
    Object.fromEntries(
      Object.entries(activities).map(([name, fn]) => [
        name,
        (...args: never[]) => (currentActivity() ? heartbeating(() => fn(...args)) : fn(...args)),
      ]),
    ) as T,
  );
}

export function createCampaignActivities(deps: { controlUrl: string; stateDir: string }) {
  // A cancelled (or timed-out) activity ends the `tbt` subprocess it runs, so a retry never runs beside an orphan.
  const withSignal = () => ({ ...deps, signal: currentActivity()?.cancellationSignal });
  const tracking = () => ({
    ...withSignal(),
    warn: (message: string) => (currentActivity()?.log ?? console).warn(message),
  });
  // Experiment trackers (campaign-records/experiment-tracking.ts): retried by the first attempts, then a warning.
  const tracked = (work: () => Promise<unknown>) =>
    trackOrWarn(work, currentActivity()?.info.attempt ?? trackingAttempts, (message, attributes) =>
      (currentActivity()?.log ?? console).warn(message, attributes),
    );

  return withHeartbeats({
    /**
     * Training candidates (never an excluded or evaluation-only uid), every suite task (`evaluation.tasks: all`)
     * and the held-out ones, those kept out of training (`evaluation.tasks: held_out`).
     */
    async ingestCandidates(
      input: CandidateIngestInput,
    ): Promise<{ uids: string[]; excluded: number; evaluationUids: string[]; heldOutUids: string[] }> {
      return ingestCandidates(deps.stateDir, input);
    },

    /** Difficulty selection over this campaign's probe episodes, by `tbt prepare` (reference semantics). */
    async selectPool(
      input: PoolSelectionInput,
    ): Promise<{ pool: string[]; bands: Record<string, number>; aggregates: string }> {
      return selectPool(withSignal(), input);
    },

    async recordStep(record: StepRecord): Promise<void> {
      await saveStepRecord(deps.controlUrl, record);
      const steps = stepsFile(deps.stateDir, record.campaignId);
      writeStepsFile(steps, await stepRecordsInOrder(deps.controlUrl, record.campaignId));
      await tracked(() => trackStep(tracking(), record));
    },

    /** Task uid, reward, outcome and version of episodes a learner trained, for a step's record (by episode id). */
    async trainedEpisodes(input: { episodeIds: string[] }): Promise<TrainedEpisode[]> {
      return trainedEpisodes(deps.controlUrl, input.episodeIds);
    },

    /** Coverage-gated aggregation of an evaluation, by `tbt eval aggregate`. */
    async aggregateEvaluation(input: EvaluationAggregationInput): Promise<{ aggregate: string; summary: string }> {
      const result = await aggregateEvaluation(withSignal(), input);
      const stepsTrained = (await latestStepRecord(deps.controlUrl, input.campaignId))?.step ?? 0;
      await tracked(() => trackEvaluation(tracking(), { ...input, aggregate: result.aggregate, stepsTrained }));
      return result;
    },

    /** Probing and training cost of a campaign (evaluation cost is in the evaluation aggregates). */
    async campaignCosts(input: CampaignCostsInput): Promise<string> {
      return writeCampaignCosts(deps, input);
    },

    async writeReport(input: CampaignReportInput): Promise<{ html: string; markdown: string }> {
      return writeCampaignReport(withSignal(), input);
    },

    /** The servers of `servers` the campaign is training on right now (an evaluation of them is refused). */
    async campaignTrainingOn(input: { campaignId: string; servers: string[] }): Promise<string[]> {
      return campaignTrainingOn(input);
    },

    /** The newest exported checkpoint of a campaign and its task pool (for scheduled re-evaluation). */
    async latestCheckpoint(input: {
      campaignId: string;
      needPool: boolean;
    }): Promise<{ step: number; exportPath: string | null; pool: string[] }> {
      return latestCheckpoint(deps, input);
    },

    /** Kept in the control database too: tracking reads it on whichever bookkeeping worker logs a step. */
    async writeManifest(input: { campaignId: string; manifest: Record<string, unknown> }): Promise<string> {
      const file = writeCampaignManifest(deps.stateDir, input.campaignId, input.manifest);
      await keepCampaignFile(deps, input.campaignId, file);
      return file;
    },
  });
}

export type CampaignActivities = ReturnType<typeof createCampaignActivities>;

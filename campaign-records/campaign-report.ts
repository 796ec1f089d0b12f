import fs from 'node:fs';
import path from 'node:path';
import { restoreCampaignFile } from './campaign-files.ts';
import { campaignRunDir } from './campaign-run-folder.ts';
import { restoreEvaluationAggregate } from './evaluation-aggregation.ts';
import { stepRecordsInOrder } from './step-records.ts';
import { stepsFile, writeStepsFile } from './steps-file.ts';
import { tbt } from './tbt-command.ts';

export interface CampaignReportInput {
  campaignId: string;
  title: string;
  before?: string;
  after?: string;
  probe?: string;
  costs?: string;
}

/**
 * The campaign's report, by `tbt report`, in `report/` of its run folder: its steps (when any were recorded),
 * probe, costs and evaluations (before and after training, or the one after), with the pages of a few episodes
 * per evaluated task in `report/episodes/` (docs/episode-viewer.md). The stages before may have run on other
 * bookkeeping workers: their files are restored from the control database and the steps file is written from
 * the recorded steps, so a fresh worker with an empty state folder writes the same report.
 */
export async function writeCampaignReport(
  deps: { controlUrl: string; stateDir: string; signal: AbortSignal | undefined },
  given: CampaignReportInput,
): Promise<{ html: string; markdown: string }> {
  const campaignId = given.campaignId;
  const file = (recorded?: string) => recorded && restoreCampaignFile(deps, campaignId, recorded);
  const evaluation = (recorded?: string) => recorded && restoreEvaluationAggregate(deps, campaignId, recorded);
  const input = {
    ...given,
    probe: await file(given.probe),
    costs: await file(given.costs),
    before: await evaluation(given.before),
    after: await evaluation(given.after),
  };
  const out = path.join(campaignRunDir(deps.stateDir, campaignId), 'report');
  const steps = stepsFile(deps.stateDir, campaignId);
  const records = await stepRecordsInOrder(deps.controlUrl, campaignId);
  if (records.length) writeStepsFile(steps, records);
  await tbt(
    [
      'report',
      '--out',
      out,
      '--title',
      input.title,
      '--campaign',
      input.campaignId,
      ...(input.probe ? ['--probe', input.probe] : []),
      ...(fs.existsSync(steps) ? ['--steps', steps] : []),
      ...(input.costs ? ['--costs', input.costs] : []),
      ...(input.before && input.after
        ? ['--before', input.before, '--after', input.after]
        : input.after
          ? ['--eval', input.after]
          : []),
      // Each evaluated task's first passed, failed and infrastructure-errored episode gets a page, linked.
      ...(input.after ? ['--episode-pages'] : []),
    ],
    deps.signal,
  );
  return { html: path.join(out, 'index.html'), markdown: path.join(out, 'summary.md') };
}

import fs from 'node:fs';
import path from 'node:path';
import { campaignRunDir } from './campaign-run-folder.ts';
import { stepsFile } from './steps-file.ts';
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
 * per evaluated task in `report/episodes/` (docs/episode-viewer.md).
 */
export async function writeCampaignReport(
  deps: { stateDir: string; signal: AbortSignal | undefined },
  input: CampaignReportInput,
): Promise<{ html: string; markdown: string }> {
  const out = path.join(campaignRunDir(deps.stateDir, input.campaignId), 'report');
  const steps = stepsFile(deps.stateDir, input.campaignId);
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

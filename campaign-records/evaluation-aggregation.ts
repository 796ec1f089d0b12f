import fs from 'node:fs';
import path from 'node:path';
import { keepCampaignFile, restoreCampaignFile, restoreCampaignFileByName, runFolderName } from './campaign-files.ts';
import { campaignRunDir } from './campaign-run-folder.ts';
import { writeResultLines } from './episode-result-lines.ts';
import { tbt } from './tbt-command.ts';

export interface EvaluationAggregationInput {
  campaignId: string;
  label: string;
  /** The evaluation's episode id prefix (sharded evaluations); `episodeIds` for ones recorded before. */
  idPrefix?: string;
  episodeIds?: string[];
  uids: string[];
  repeats: number;
  prices?: string;
}

/**
 * Coverage-gated aggregation of an evaluation, by `tbt eval aggregate`: its result lines, task list and
 * aggregate are `eval-<label>*` files in the campaign's run folder. The aggregate names its result lines relative
 * to itself, so that both, kept in the control database too, serve a report written on another bookkeeping worker
 * (its episode pages come from the result lines). Returns the aggregate and the command's summary.
 */
export async function aggregateEvaluation(
  deps: { controlUrl: string; stateDir: string; signal: AbortSignal | undefined },
  input: EvaluationAggregationInput,
): Promise<{ aggregate: string; summary: string }> {
  const dir = campaignRunDir(deps.stateDir, input.campaignId);
  const results = path.join(dir, `eval-${input.label}.jsonl`);
  await writeResultLines(
    deps.controlUrl,
    input.idPrefix !== undefined
      ? { campaignId: input.campaignId, purpose: 'eval', idPrefix: input.idPrefix }
      : { episodeIds: input.episodeIds ?? [] },
    results,
  );
  const tasks = path.join(dir, `eval-${input.label}-tasks.yaml`);
  fs.writeFileSync(tasks, input.uids.map((u) => `- ${JSON.stringify(u)}`).join('\n') + '\n');
  const aggregate = path.join(dir, `eval-${input.label}.json`);
  const summary = await tbt(
    [
      'eval',
      'aggregate',
      '--results',
      path.basename(results),
      '--repeats',
      String(input.repeats),
      '--tasks',
      path.basename(tasks),
      '--out',
      aggregate,
      ...(input.prices ? ['--prices', path.resolve(input.prices)] : []),
    ],
    deps.signal,
    dir,
  );
  for (const file of [results, aggregate]) await keepCampaignFile(deps, input.campaignId, file);
  return { aggregate, summary: summary.slice(0, 4000) };
}

/**
 * This worker's copy of an evaluation's aggregate (`recorded`: the path `aggregateEvaluation` returned, maybe on
 * another worker) and of the result lines it names relative to itself, restored from the control database.
 */
export async function restoreEvaluationAggregate(
  deps: { controlUrl: string; stateDir: string },
  campaignId: string,
  recorded: string,
): Promise<string> {
  const aggregate = await restoreCampaignFile(deps, campaignId, recorded);
  const name = runFolderName(campaignId, aggregate);
  if (name === undefined || !fs.existsSync(aggregate)) return aggregate;
  const { inputs } = JSON.parse(fs.readFileSync(aggregate, 'utf8')) as { inputs?: { results?: { path: string }[] } };
  for (const { path: results } of inputs?.results ?? [])
    if (!path.isAbsolute(results))
      await restoreCampaignFileByName(deps, campaignId, path.join(path.dirname(name), results));
  return aggregate;
}

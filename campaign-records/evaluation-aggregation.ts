import fs from 'node:fs';
import path from 'node:path';
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
 * aggregate are `eval-<label>*` files in the campaign's run folder. Returns the aggregate and the command's summary.
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
      results,
      '--repeats',
      String(input.repeats),
      '--tasks',
      tasks,
      '--out',
      aggregate,
      ...(input.prices ? ['--prices', input.prices] : []),
    ],
    deps.signal,
  );
  return { aggregate, summary: summary.slice(0, 4000) };
}

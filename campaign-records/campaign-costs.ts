import fs from 'node:fs';
import path from 'node:path';
import { priceTableSchema } from '../config/price-table.ts';
import { formatProblem, parseYamlFile } from '../config/yaml-file.ts';
import { BadInputError } from '../core/errors.ts';
import { campaignCost } from '../core/metrics.ts';
import { withClient } from '../infra/control-database.ts';
import { resultLine } from '../rollout/episode-result-line.ts';
import type { EpisodeRecord } from '../rollout/episode-runner.ts';
import { keepCampaignFile } from './campaign-files.ts';
import { campaignRunDir } from './campaign-run-folder.ts';
import { learnerSeconds } from './step-records.ts';

export interface CampaignCostsInput {
  campaignId: string;
  prices: string;
  hourlyPriceUsd: number;
  learnerProcesses: number;
}

interface CostRow {
  purpose: string;
  id: string;
  task_uid: string;
  repetition: number;
  domain: string;
  record: Pick<EpisodeRecord, 'outcome' | 'finishReason' | 'usage'>;
}

/**
 * What the reference leaves out: probing cost (probe episode tokens x prices) and training cost (training
 * episode tokens x prices + learner process-seconds x the hourly price). Evaluation cost comes from the
 * evaluation aggregates. Writes `costs.json` in the campaign's run folder (kept in the control database for the
 * report, which may run on another bookkeeping worker); returns its path.
 */
export async function writeCampaignCosts(
  deps: { controlUrl: string; stateDir: string },
  input: CampaignCostsInput,
): Promise<string> {
  const parsedPrices = parseYamlFile(input.prices, priceTableSchema);
  if (!parsedPrices.value) throw new BadInputError(parsedPrices.problems.map(formatProblem).join('\n'));
  const prices = parsedPrices.value;
  const rows = await withClient(deps.controlUrl, (c) =>
    c.query<CostRow>(
      // Only what the cost needs: never trajectories or token arrays.
      `SELECT purpose, id, task_uid, repetition, domain, jsonb_build_object('outcome', status, 'finishReason',
             finish_reason, 'usage', record->'usage') AS record
           FROM episodes WHERE campaign = $1 AND record IS NOT NULL`,
      [input.campaignId],
    ),
  );
  const tokenCost = (purpose: string) =>
    campaignCost(
      rows.rows
        .filter((r) => r.purpose === purpose)
        .map((r) => resultLine(r.id, r.task_uid, r.repetition, r.domain, r.record).tokens),
      prices,
    ).total;
  const seconds = await learnerSeconds(deps.controlUrl, input.campaignId);
  const costs = {
    probing: tokenCost('probe'),
    training: tokenCost('train') + (seconds * input.learnerProcesses * input.hourlyPriceUsd) / 3600,
  };
  const file = path.join(campaignRunDir(deps.stateDir, input.campaignId), 'costs.json');
  fs.writeFileSync(file, `${JSON.stringify(costs, null, 2)}\n`);
  await keepCampaignFile(deps, input.campaignId, file);
  return file;
}

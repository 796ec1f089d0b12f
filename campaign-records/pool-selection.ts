import fs from 'node:fs';
import path from 'node:path';
import { readYamlValue } from '../config/yaml-file.ts';
import { BadInputError } from '../core/errors.ts';
import { keepCampaignFile, restoreCampaignFileByName } from './campaign-files.ts';
import { campaignRunDir } from './campaign-run-folder.ts';
import { writeResultLines } from './episode-result-lines.ts';
import { tbt } from './tbt-command.ts';

export interface PoolSelectionInput {
  campaignId: string;
  /** The probe's episode id prefix (sharded probes); `probeEpisodeIds` for probes recorded before. */
  idPrefix?: string;
  probeEpisodeIds?: string[];
  minCleanRuns: number;
  retainBands: string[];
}

export interface PoolSelection {
  pool: string[];
  bands: Record<string, number>;
  aggregates: string;
}

/**
 * Difficulty selection over this campaign's probe episodes, by `tbt prepare` (reference semantics): its output
 * (`selected.yaml`, `aggregates.jsonl`) lands in `prepare/` of the campaign's run folder and in the control
 * database, where the report and scheduled evaluations find them on any bookkeeping worker.
 */
export async function selectPool(
  deps: { controlUrl: string; stateDir: string; signal: AbortSignal | undefined },
  input: PoolSelectionInput,
): Promise<PoolSelection> {
  const dir = campaignRunDir(deps.stateDir, input.campaignId);
  const results = path.join(dir, 'probe-results.jsonl');
  await writeResultLines(
    deps.controlUrl,
    input.idPrefix !== undefined
      ? { campaignId: input.campaignId, purpose: 'probe', idPrefix: input.idPrefix }
      : { episodeIds: input.probeEpisodeIds ?? [] },
    results,
  );
  const out = path.join(dir, 'prepare');
  await tbt(
    [
      'prepare',
      '--policy',
      results,
      '--output-dir',
      out,
      '--uid-field',
      'uid',
      '--success-field',
      'success',
      '--system-error-field',
      // Infrastructure and task errors alike (a task error's test raised: it says nothing of the policy).
      'is_system_error',
      '--min-clean-runs',
      String(input.minCleanRuns),
      ...input.retainBands.flatMap((b) => ['--retain-band', b]),
    ],
    deps.signal,
  );
  const selected = path.join(out, 'selected.yaml');
  const aggregates = path.join(out, 'aggregates.jsonl');
  for (const file of [selected, aggregates]) await keepCampaignFile(deps, input.campaignId, file);
  const pool = (readYamlValue(selected) as string[]) ?? [];
  const bands: Record<string, number> = {};
  for (const line of fs.readFileSync(aggregates, 'utf8').split('\n').filter(Boolean)) {
    const d = (JSON.parse(line) as { difficulty: string }).difficulty;
    bands[d] = (bands[d] ?? 0) + 1;
  }
  return { pool, bands, aggregates };
}

/** Where `selectPool` leaves a campaign's selected pool. */
export function selectedPoolFile(stateDir: string, campaignId: string): string {
  return path.join(campaignRunDir(stateDir, campaignId), 'prepare', 'selected.yaml');
}

/**
 * The pool a campaign's probe selected, from the control database (any worker), else from this worker's run
 * folder (a campaign probed before the database kept it); bad input when it was never probed.
 */
export async function campaignPool(
  deps: { controlUrl: string; stateDir: string },
  campaignId: string,
): Promise<string[]> {
  const stored = await restoreCampaignFileByName(deps, campaignId, path.join('prepare', 'selected.yaml'));
  return readSelectedPool(campaignId, stored ?? selectedPoolFile(deps.stateDir, campaignId));
}

/** The pool a campaign's probe selected; bad input when it was never probed. */
export function readSelectedPool(campaignId: string, selected: string): string[] {
  if (!fs.existsSync(selected))
    throw new BadInputError(`campaign ${campaignId} has no selected pool (${selected} missing): was it probed?`);
  return (readYamlValue(selected) as string[]) ?? [];
}

import fs from 'node:fs';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { repoRoot } from './environment.ts';

/** A campaign config file as YAML data, before validation. */
export type RawCampaignConfig = Record<string, unknown> & {
  name: string;
  training: Record<string, unknown>;
  learner: Record<string, unknown>;
};

/**
 * Writes a variant of a campaign config file (a benchmark's or a suite's second mode) to `outFile`: `edit` changes
 * the data; the paths it names (suite, exclude_uids, prices) are made absolute first, resolved as the CLI resolves
 * them (beside the original file, else from the repository root), so the variant works from any folder.
 */
export function writeConfigVariant(file: string, outFile: string, edit: (config: RawCampaignConfig) => void): string {
  const config = parse(fs.readFileSync(file, 'utf8')) as RawCampaignConfig;
  const base = path.dirname(path.resolve(file));
  for (const field of ['suite', 'exclude_uids', 'prices']) {
    const value = config[field];
    if (typeof value !== 'string') continue;
    config[field] = [path.resolve(base, value), path.resolve(repoRoot, value)].find((p) => fs.existsSync(p)) ?? value;
  }
  edit(config);
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(outFile, stringify(config));
  return outFile;
}

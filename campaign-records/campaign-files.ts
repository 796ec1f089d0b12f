import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { campaignFileName } from '../core/campaign-id.ts';
import { withClient } from '../infra/control-database.ts';
import { campaignRunDir } from './campaign-run-folder.ts';

/**
 * The files of a campaign's run folder that a later stage reads (the selected pool, the probe and evaluation
 * aggregates, the evaluation result lines, the costs, the manifest), kept in the control database as well
 * (`campaign_files`). Bookkeeping workers are stateless: the stage that reads a file may run on another worker, or on
 * a recreated one with an empty state folder, so the reader restores it from the database into its own run folder.
 * They are small (a few MB of JSON lines at most, stored gzip-compressed); large outputs (the report and its episode
 * pages) stay on the state volume only, and can be written again from these.
 */

/** The file's path in its campaign's run folder (`prepare/selected.yaml`), from a path under any state folder. */
export function runFolderName(campaignId: string, file: string): string | undefined {
  const marker = `${path.sep}campaigns${path.sep}${campaignFileName(campaignId)}${path.sep}`;
  const at = file.lastIndexOf(marker);
  return at < 0 ? undefined : file.slice(at + marker.length);
}

/** Stores `file` (in the campaign's run folder under `stateDir`) in the control database; replaces an older copy. */
export async function keepCampaignFile(
  deps: { controlUrl: string; stateDir: string },
  campaignId: string,
  file: string,
): Promise<void> {
  const name = path.relative(campaignRunDir(deps.stateDir, campaignId), file);
  if (name.startsWith('..') || path.isAbsolute(name))
    throw new Error(`${file} is not in campaign ${campaignId}'s folder`);
  const content = gzipSync(fs.readFileSync(file));
  await withClient(deps.controlUrl, (c) =>
    c.query(
      `INSERT INTO campaign_files (campaign, name, content) VALUES ($1, $2, $3)
         ON CONFLICT (campaign, name) DO UPDATE SET content = EXCLUDED.content, written_at = now()`,
      [campaignId, name.split(path.sep).join('/'), content],
    ),
  );
}

/**
 * This worker's copy of a campaign file another stage wrote (`recorded`: the path that stage returned, under its
 * worker's state folder): written from the control database into this worker's run folder, and its path returned.
 * A file the database does not hold (written before it kept them, or not one of a campaign's) is returned as
 * recorded: the worker that wrote it may be this one.
 */
export async function restoreCampaignFile(
  deps: { controlUrl: string; stateDir: string },
  campaignId: string,
  recorded: string,
): Promise<string> {
  const name = runFolderName(campaignId, recorded);
  if (name === undefined) return recorded;
  return (await restoreCampaignFileByName(deps, campaignId, name)) ?? recorded;
}

/** Writes the stored file `name` into this worker's run folder; its path, or undefined when none is stored. */
export async function restoreCampaignFileByName(
  deps: { controlUrl: string; stateDir: string },
  campaignId: string,
  name: string,
): Promise<string | undefined> {
  const { rows } = await withClient(deps.controlUrl, (c) =>
    c.query<{ content: Buffer }>('SELECT content FROM campaign_files WHERE campaign = $1 AND name = $2', [
      campaignId,
      name.split(path.sep).join('/'),
    ]),
  );
  if (!rows[0]) return undefined;
  const file = path.join(campaignRunDir(deps.stateDir, campaignId), name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  // Atomic: another activity of the campaign on this worker may be reading the same file.
  const tmp = `${file}.${randomUUID()}.tmp`;
  fs.writeFileSync(tmp, gunzipSync(rows[0].content));
  fs.renameSync(tmp, file);
  return file;
}

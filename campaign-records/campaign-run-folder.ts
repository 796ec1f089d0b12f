import fs from 'node:fs';
import path from 'node:path';
import { campaignFileName } from '../core/campaign-id.ts';

/** A campaign's folder under the state directory (created on first use): its candidates, results and report. */
export function campaignRunDir(stateDir: string, campaignId: string): string {
  const dir = path.join(stateDir, 'campaigns', campaignFileName(campaignId));
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** Writes the campaign's manifest (`manifest.json` in its run folder); returns its path. */
export function writeCampaignManifest(stateDir: string, campaignId: string, manifest: Record<string, unknown>): string {
  const file = path.join(campaignRunDir(stateDir, campaignId), 'manifest.json');
  fs.writeFileSync(file, `${JSON.stringify(manifest, null, 2)}\n`);
  return file;
}

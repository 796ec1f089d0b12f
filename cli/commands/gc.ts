import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { errorMessage } from '../../core/errors.ts';
import { redactSecretsInText } from '../../core/secret-text.ts';
import {
  collectGarbage,
  defaultRetention,
  defaultTemplateMaxAgeDays,
  pruneEpisodeRecords,
} from '../../infra/retention.ts';
import { SandboxPool } from '../../sandbox/sandbox-pool.ts';
import { integerFlag, optionalIntegerFlag } from '../flag-values.ts';
import { gcCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';

/**
 * `tbt gc [--keep-exports K] [--max-log-mb N] [--templates-older-than DAYS] [--episodes-older-than DAYS]
 * [--dry-run]`: apply the retention policy to the state folder and to this deployment's control database.
 */

const dayMs = 24 * 3600_000;

export async function gc(args: string[]): Promise<number> {
  const line = commandLineOrExit(gcCommand, args);
  if (typeof line === 'number') return line;
  const { values } = line;
  const policy = { ...defaultRetention };
  const dryRun = values['dry-run'];
  if (values['keep-exports'] !== undefined)
    policy.keepExports = integerFlag('--keep-exports', values['keep-exports'], { min: 1 });
  if (values['max-log-mb'] !== undefined)
    policy.maxLogBytes = integerFlag('--max-log-mb', values['max-log-mb'], { min: 1 }) * 1024 * 1024;
  const templateDays =
    optionalIntegerFlag('--templates-older-than', values['templates-older-than'], { min: 1 }) ??
    defaultTemplateMaxAgeDays;
  const episodeDays = optionalIntegerFlag('--episodes-older-than', values['episodes-older-than'], { min: 1 });
  const env = readEnvironment();
  const report = collectGarbage(env.TBT_STATE_DIR, policy, dryRun);
  const verb = dryRun ? 'would remove' : 'removed';
  for (const f of report.removed) console.log(`${verb} ${f}`);
  for (const f of report.rotated) console.log(`${dryRun ? 'would rotate' : 'rotated'} ${f}`);
  console.log(
    `${verb} ${report.removed.length} item(s), rotated ${report.rotated.length} log(s), ` +
      `${(report.freedBytes / 1e6).toFixed(1)} MB`,
  );
  const controlUrl = databaseUrl(env);
  const pool = new SandboxPool({ controlUrl, warm: 0 });
  try {
    const templates = await pool.pruneTemplates({ olderThanMs: templateDays * dayMs, dryRun });
    for (const t of templates) console.log(`${dryRun ? 'would drop' : 'dropped'} template database ${t}`);
    console.log(`${dryRun ? 'would drop' : 'dropped'} ${templates.length} unused template database(s)`);
  } catch (err) {
    // The state folder needs no server; the records asked for do.
    if (episodeDays !== undefined) throw err;
    console.error(`template databases not pruned: ${redactSecretsInText(errorMessage(err))}`);
    return 0;
  } finally {
    await pool.close();
  }
  if (episodeDays !== undefined) {
    const records = await pruneEpisodeRecords(controlUrl, { olderThanDays: episodeDays, dryRun });
    console.log(
      `${dryRun ? 'would delete' : 'deleted'} ${records.episodes} episode row(s), ${records.campaignSteps} ` +
        `campaign step row(s) and ${records.campaignFiles} campaign file(s) (${records.campaigns.length} whole ` +
        `campaign(s) idle for ${episodeDays} days)`,
    );
  }
  return 0;
}

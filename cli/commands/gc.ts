import { readEnvironment } from '../../config/environment.ts';
import { collectGarbage, defaultRetention } from '../../infra/retention.ts';
import { integerFlag } from '../flag-values.ts';
import { gcCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';

/** `tbt gc [--keep-exports K] [--max-log-mb N] [--dry-run]`: apply the retention policy to the state folder. */

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
  const env = readEnvironment();
  const report = collectGarbage(env.TBT_STATE_DIR, policy, dryRun);
  const verb = dryRun ? 'would remove' : 'removed';
  for (const f of report.removed) console.log(`${verb} ${f}`);
  for (const f of report.rotated) console.log(`${dryRun ? 'would rotate' : 'rotated'} ${f}`);
  console.log(
    `${verb} ${report.removed.length} item(s), rotated ${report.rotated.length} log(s), ` +
      `${(report.freedBytes / 1e6).toFixed(1)} MB`,
  );
  return 0;
}

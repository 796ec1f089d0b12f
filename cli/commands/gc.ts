import { readEnvironment } from '../../config/environment.ts';
import { collectGarbage, defaultRetention } from '../../infra/retention.ts';
import { integerFlag } from '../flag-values.ts';

/** `tbt gc [--keep-exports K] [--max-log-mb N] [--dry-run]`: apply the retention policy to the state folder. */

const usage = 'usage: tbt gc [--keep-exports K (>= 1, default 2)] [--max-log-mb N (>= 1, default 64)] [--dry-run]';

export async function gc(args: string[]): Promise<number> {
  const policy = { ...defaultRetention };
  let dryRun = false;
  for (let i = 0; i < args.length; i++) {
    const flag = args[i];
    if (flag === '--keep-exports') policy.keepExports = integerFlag(flag, args[++i] ?? '', { min: 1 });
    else if (flag === '--max-log-mb') policy.maxLogBytes = integerFlag(flag, args[++i] ?? '', { min: 1 }) * 1024 * 1024;
    else if (flag === '--dry-run') dryRun = true;
    else throw new Error(`unknown argument ${flag}\n${usage}`);
  }
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

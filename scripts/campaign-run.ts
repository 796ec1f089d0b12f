/**
 * One campaign run of the on-demand suites, start to checked summary: start it, wait for its end, run the checks
 * (scripts/campaign-run-checks.ts), prune its checkpoints; the uninterrupted baseline, run or reused by id.
 */
import fs from 'node:fs';
import path from 'node:path';
import { startCampaign } from '../cli/commands/campaign.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { Environment } from '../config/environment.ts';
import {
  check,
  checkContext,
  pruneCheckpoints,
  runChecks,
  type Check,
  type CheckContext,
  type Facts,
} from './campaign-run-checks.ts';
import { CampaignDriver, now, secs, type WaitedEnd } from './campaign-run-driver.ts';
import { printChecks, type RunSummary } from './campaign-run-summary.ts';

export interface Suite {
  driver: CampaignDriver;
  ctx: CheckContext;
  keepCheckpoints: boolean;
}

/** What every on-demand suite opens with: its folder under the state folder, its driver and its checks' context. */
export function openSuite(
  env: Environment,
  config: CampaignConfig,
  opts: { tag: string; folder: string; timeoutMin: string; keepCheckpoints: boolean },
): { suite: Suite; driver: CampaignDriver; outDir: string; log: (msg: string) => void } {
  const outDir = path.join(env.TBT_STATE_DIR, opts.folder);
  fs.mkdirSync(outDir, { recursive: true });
  const driver = new CampaignDriver(env, opts.tag, Number(opts.timeoutMin) * 60_000);
  const suite: Suite = {
    driver,
    ctx: checkContext(env, config),
    keepCheckpoints: opts.keepCheckpoints,
  };
  return { suite, driver, outDir, log: (msg) => driver.log(msg) };
}

export async function startRun(configFile: string, id: string): Promise<number> {
  const started = now();
  await startCampaign(configFile, { wait: false, id });
  return started;
}

/** Checks a finished run (plus the suite's own checks of it), prunes its checkpoints, prints and summarises. */
export async function finishRun(
  suite: Suite,
  run: { name: string; id: string; started: number; end: WaitedEnd; baseline?: Facts; extra?: Check[] },
): Promise<{ summary: RunSummary; f: Facts }> {
  const wallS = secs(now() - run.started);
  const { list, f, realUpdates, retrained } = await runChecks(suite.ctx, run.id, run.end, run.baseline);
  list.push(...(run.extra ?? []));
  // A hung run keeps its files for diagnosis.
  if (!suite.keepCheckpoints && !run.end.status.startsWith('TIMED_OUT')) pruneCheckpoints(suite.ctx.env, run.id);
  printChecks((m) => suite.driver.log(m), list);
  const summary: RunSummary = {
    run: run.name,
    campaignId: run.id,
    wallS,
    realUpdates,
    retrainedBeforeCommit: retrained,
    checks: list,
    passed: list.every((c) => c.pass),
  };
  return { summary, f };
}

/** The uninterrupted baseline: the campaign run once, with every check but the baseline comparison. */
export async function runBaseline(suite: Suite, configFile: string, id: string) {
  suite.driver.log(`run ${id}: uninterrupted baseline`);
  const started = await startRun(configFile, id);
  const end = await suite.driver.waitForEnd(id, started);
  return finishRun(suite, { name: 'baseline', id, started, end });
}

/** A finished baseline campaign (`--baseline ID`), checked again; its wall time is not known (0). */
export async function reuseBaseline(suite: Suite, id: string) {
  suite.driver.log(`baseline: reusing campaign ${id}`);
  const end: WaitedEnd = {
    status: (await suite.driver.describe(id)) ?? 'UNKNOWN',
    result: await suite.driver.result(id),
    workerRestarts: [],
    pauses: [],
  };
  const { summary, f } = await finishRun(suite, { name: 'baseline (reused)', id, started: now(), end });
  return { summary: { ...summary, wallS: 0 }, f };
}

/** A check that the suite's fault really happened where it was drawn (a run that never met it proves nothing). */
export const injectedCheck = (what: string, ok: boolean, detail: string) =>
  check(`the fault was injected: ${what}`, ok, detail);

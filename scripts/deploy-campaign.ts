/**
 * The campaign of `npm run test:deploy` (scripts/deploy-test.sh), watched from the host against the compose stack's
 * Temporal port and checked as the crash suite checks a run (scripts/campaign-run-checks.ts). The script submits it
 * with the `tbt` CLI service and recreates the containers between the two calls:
 *
 *   tsx scripts/deploy-campaign.ts wait CONFIG ID STEP TIMEOUT_MIN   until training step STEP is under way
 *   tsx scripts/deploy-campaign.ts finish CONFIG ID TIMEOUT_MIN      until the campaign ends, then every check
 *
 * Environment: TBT_TEMPORAL_ADDRESS and TBT_TEMPORAL_NAMESPACE (the stack's), DATABASE_URL (the control database
 * through its published port), TBT_STATE_DIR (the tbt-checkpoints volume's folder on this host: the learner's
 * checkpoints and ledger, as the GPU worker wrote them). `finish` prints each check and last
 * `campaign: steps=N checks=P/T real-updates=R retrained-before-commit=K wall=Ts`; exit 1 if a check fails.
 */
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { readEnvironment } from '../config/environment.ts';
import { workerKinds } from '../infra/local-workers.ts';
import { checkContext, runChecks } from './campaign-run-checks.ts';
import { CampaignDriver, inPhase, now, secs, statusLine } from './campaign-run-driver.ts';
import { printChecks } from './campaign-run-summary.ts';

async function waitForStep(driver: CampaignDriver, id: string, step: number): Promise<void> {
  const started = now();
  const phase = { kind: 'step', step } as const;
  if (!(await driver.waitForPhase(id, phase, started)))
    throw new Error(`${id}: training step ${step} never started (${statusLine(await driver.status(id))})`);
  // Past it already (a step shorter than a poll): the containers would be recreated after the step, not during it.
  const s = await driver.status(id);
  if (!s || !inPhase(s, phase)) throw new Error(`${id}: not in training step ${step} but ${statusLine(s)}`);
  driver.log(`${id}: in training step ${step} after ${secs(now() - started)}s (${statusLine(s)})`);
}

async function finish(driver: CampaignDriver, configFile: string, id: string): Promise<boolean> {
  const env = readEnvironment();
  const started = now();
  // Every worker runs in a container: the waiting loop must never start one here (it would on the crash suite's
  // local stack), so all are "held down".
  const end = await driver.waitForEnd(id, started, { heldDown: () => new Set(workerKinds) });
  const ctx = checkContext(env, loadCampaignConfig(configFile));
  const { list, realUpdates, retrained } = await runChecks(ctx, id, end);
  printChecks((m) => driver.log(m), list);
  const passed = list.filter((c) => c.pass).length;
  console.log(
    `campaign: steps=${ctx.steps} checks=${passed}/${list.length} real-updates=${realUpdates} ` +
      `retrained-before-commit=${retrained} status=${end.status} wait=${secs(now() - started)}s`,
  );
  return passed === list.length;
}

async function run(): Promise<void> {
  const [command, configFile, id, ...rest] = process.argv.slice(2);
  if (!configFile || !id || !['wait', 'finish'].includes(command ?? ''))
    throw new Error('usage: deploy-campaign.ts wait CONFIG ID STEP TIMEOUT_MIN | finish CONFIG ID TIMEOUT_MIN');
  const timeoutMin = Number(command === 'wait' ? rest[1] : rest[0]);
  const driver = new CampaignDriver(readEnvironment(), 'deploy', timeoutMin * 60_000);
  try {
    if (command === 'wait') await waitForStep(driver, id, Number(rest[0]));
    else if (!(await finish(driver, configFile, id))) process.exitCode = 1;
  } finally {
    await driver.close();
  }
}

run().catch((err: unknown) => {
  console.error(`campaign: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});

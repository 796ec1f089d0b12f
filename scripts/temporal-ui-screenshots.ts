import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '@temporalio/client';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { createCampaignActivities } from '../activities/campaign-activities.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { databaseUrl, readEnvironment, repoRoot, temporalUiUrl } from '../config/environment.ts';
import { launchChromium } from '../infra/headless-chromium.ts';
import { registerMissingSearchAttributes } from '../infra/temporal-dev-server.ts';
import { loadSuites } from '../task-suites/task-suite-loader.ts';
import { campaignWorkflow, pauseSignal } from '../workflows/campaign-workflow.ts';
import { evaluationWorkflow } from '../workflows/evaluation-workflow.ts';
import { campaignAttributes } from '../workflows/search-attribute-keys.ts';
import { evaluationSummary } from '../workflows/ui-text.ts';
import { connectTemporalClient, connectTemporalWorker } from '../infra/temporal-connection.ts';

/**
 * The Temporal UI screenshots of docs/temporal-ui.md, on the local dev server: an in-process worker on task queues
 * of its own (so the shared `tbt workers` are neither needed nor disturbed: no stack lock) runs the real workflow
 * code and the real bookkeeping activities; no worker polls its rollout and GPU queues. An evaluation's shard so
 * holds its episodes pending, and a campaign of config/local.yaml ingests its suite, then waits for its learner;
 * it is paused and found by `TbtPaused = true`. Both are terminated afterwards.
 * `node --import tsx scripts/temporal-ui-screenshots.ts` (the dev server and Postgres up: `tbt up`).
 */

const env = readEnvironment();
const queues = { workflows: 'tbt-docs-ui', rollout: 'tbt-docs-ui-rollout', gpu: 'tbt-docs-ui-gpu' };
const ui = `${temporalUiUrl(env)}/namespaces/${env.TBT_TEMPORAL_NAMESPACE}`;
const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
const evalCampaign = `ui-shard-${stamp}`;
const pausedCampaign = `ui-paused-${stamp}`;
const docs = path.join(repoRoot, 'docs');

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 180_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(1000);
  }
}

await registerMissingSearchAttributes(env);
const connection = await connectTemporalClient(env);
const client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
const workerConnection = await connectTemporalWorker(env);
const worker = await Worker.create({
  connection: workerConnection,
  namespace: env.TBT_TEMPORAL_NAMESPACE,
  taskQueue: queues.workflows,
  workflowBundle: await bundleWorkflowCode({ workflowsPath: path.join(repoRoot, 'workflows', 'index.ts') }),
  activities: createCampaignActivities({ controlUrl: databaseUrl(env), stateDir: env.TBT_STATE_DIR }),
});
const running = worker.run();
try {
  const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  const suiteDir = path.join(repoRoot, config.suite);
  const uids = loadSuites(suiteDir).suites[0]!.tasks.map((t) => t.uid);
  const repeats = 4;
  const evaluation = await client.workflow.start(evaluationWorkflow, {
    workflowId: `${evalCampaign}/eval-before`,
    taskQueue: queues.workflows,
    staticSummary: evaluationSummary('evaluation before training', uids.length, repeats),
    typedSearchAttributes: campaignAttributes(evalCampaign, 'evaluate-before', 0),
    args: [
      {
        uids,
        repeats,
        concurrency: 8,
        shardSize: 16,
        episode: config.episode,
        suiteDir,
        campaignId: evalCampaign,
        rolloutQueue: queues.rollout,
        maxReruns: 3,
        label: 'before',
      },
    ],
  });
  const campaign = await client.workflow.start(campaignWorkflow, {
    workflowId: pausedCampaign,
    taskQueue: queues.workflows,
    typedSearchAttributes: campaignAttributes(pausedCampaign, 'ingest', 0),
    args: [{ campaignId: pausedCampaign, config, suiteDir, queues: { rollout: queues.rollout, gpu: queues.gpu } }],
  });
  await campaign.signal(pauseSignal, { reason: 'paused for the docs screenshot: no GPU worker polls its queue' });

  const shard = client.workflow.getHandle(`${evalCampaign}/eval-before/shard-0`);
  const shardRun = await until('pending episodes in shard-0', async () => {
    const d = await shard.describe();
    return (d.raw.pendingActivities?.length ?? 0) >= 8 ? d.runId : undefined;
  });
  await until('the paused campaign listed', async () => {
    for await (const w of client.workflow.list({ query: `TbtPaused = true AND TbtCampaign = "${pausedCampaign}"` }))
      return w.workflowId;
    return undefined;
  });
  const campaignRun = (await campaign.describe()).runId;

  const browser = await launchChromium();
  try {
    // Tall: the UI scrolls inside its own panes, so a full-page shot holds only what the viewport shows.
    const page = await browser.newPage({ viewport: { width: 1600, height: 2000 } });
    const shot = async (url: string, waitText: string, file: string) => {
      await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 60_000 });
      // The UI keeps polling (no network idle) and renders hidden dialogs with the same texts: wait for a visible one.
      await page
        .getByText(waitText)
        .filter({ visible: true })
        .first()
        .waitFor({ timeout: 60_000 })
        .catch(() => console.log(`${file}: "${waitText}" not seen; screenshot anyway`));
      await delay(3000);
      await page.screenshot({ path: path.join(docs, file), fullPage: true });
      console.log(`${file}: ${url}`);
    };
    const wf = (id: string, run: string, tab: string) => `${ui}/workflows/${encodeURIComponent(id)}/${run}/${tab}`;
    await shot(wf(shard.workflowId, shardRun, 'pending-activities'), '#0', 'temporal-ui-shard.png');
    await shot(wf(shard.workflowId, shardRun, 'timeline'), 'eval ·', 'temporal-ui-shard-timeline.png');
    await shot(
      `${ui}/workflows?query=${encodeURIComponent('TbtPaused = true AND ExecutionStatus = "Running"')}`,
      pausedCampaign,
      'temporal-ui-paused.png',
    );
    await shot(
      wf(pausedCampaign, campaignRun, 'user-metadata'),
      'paused for the docs',
      'temporal-ui-paused-details.png',
    );
  } finally {
    await browser.close();
    await evaluation.terminate('docs screenshot taken').catch(() => undefined);
    await campaign.terminate('docs screenshot taken').catch(() => undefined);
  }
} finally {
  worker.shutdown();
  await running;
  await workerConnection.close();
  await connection.close();
}

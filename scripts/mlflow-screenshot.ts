/**
 * Screenshot of campaigns' metric curves in the MLflow UI: starts the MLflow server of the tracking venv on the
 * local store (TBT_STATE_DIR/tracking/mlflow.db, or --store URI), opens its metric page for the named campaigns'
 * runs in headless Chromium and saves a PNG. Used for docs/mlflow-*.png (docs/experiment-tracking.md).
 *
 *   tsx scripts/mlflow-screenshot.ts --out docs/mlflow-reward-curve.png CAMPAIGN [CAMPAIGN...]
 *     [--metric train/mean_reward] [--store sqlite:///...] [--port 5055]
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { localTrackingStores } from '../campaign-records/experiment-tracking.ts';
import { readEnvironment } from '../config/environment.ts';
import { launchChromium } from '../infra/headless-chromium.ts';
import { trackingPythonBinary } from '../infra/python-env.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    out: { type: 'string' },
    metric: { type: 'string', default: 'train/mean_reward' },
    store: { type: 'string' },
    experiment: { type: 'string', default: 'thinkingbox-temporal' },
    port: { type: 'string', default: '5055' },
  },
});
if (!values.out || positionals.length === 0) {
  console.error('usage: tsx scripts/mlflow-screenshot.ts --out FILE.png CAMPAIGN [CAMPAIGN...] [--metric KEY]');
  process.exit(2);
}
const store = values.store ?? localTrackingStores(readEnvironment().TBT_STATE_DIR).mlflowUri;
const base = `http://127.0.0.1:${values.port}`;
const mlflow = path.join(path.dirname(trackingPythonBinary()), 'mlflow');
const server = spawn(mlflow, ['server', '--backend-store-uri', store, '--host', '127.0.0.1', '--port', values.port], {
  stdio: ['ignore', 'ignore', 'pipe'],
  detached: true,
});
let serverLog = '';
server.stderr.on('data', (d: Buffer) => (serverLog = (serverLog + d.toString()).slice(-4000)));

async function api<T>(route: string, body?: object): Promise<T> {
  const response = await fetch(`${base}/api/2.0/mlflow/${route}`, {
    method: body ? 'POST' : 'GET',
    headers: { 'content-type': 'application/json' },
    body: body && JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${route}: HTTP ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

async function waitForServer(): Promise<void> {
  const until = Date.now() + 180_000;
  while (Date.now() < until) {
    if (server.exitCode !== null) throw new Error(`mlflow server exited: ${serverLog}`);
    try {
      if ((await fetch(`${base}/health`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error(`mlflow server not up after 3 minutes: ${serverLog}`);
}

async function main(): Promise<void> {
  await waitForServer();
  const { experiment } = await api<{ experiment: { experiment_id: string } }>(
    `experiments/get-by-name?experiment_name=${encodeURIComponent(values.experiment!)}`,
  );
  const runIds: string[] = [];
  for (const campaign of positionals) {
    const found = await api<{ runs?: { info: { run_id: string } }[] }>('runs/search', {
      experiment_ids: [experiment.experiment_id],
      filter: `tags.\`tbt.campaign_id\` = '${campaign}'`,
    });
    if (!found.runs?.length) throw new Error(`no MLflow run of campaign ${campaign}`);
    runIds.push(found.runs[0]!.info.run_id);
  }
  const query = new URLSearchParams({
    runs: JSON.stringify(runIds),
    metric: JSON.stringify(values.metric),
    experiments: JSON.stringify([experiment.experiment_id]),
    plot_metric_keys: JSON.stringify([values.metric]),
    x_axis: 'step',
    show_point: 'true',
  });
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
    await page.goto(`${base}/#/metric?${query.toString()}`, { waitUntil: 'load', timeout: 120_000 });
    // The UI keeps polling runs that are still open, so the network never idles: wait for the plot and its legend.
    await page.waitForSelector('.js-plotly-plot, canvas, svg.main-svg', { timeout: 120_000 });
    for (const campaign of positionals) await page.getByText(campaign).first().waitFor({ timeout: 60_000 });
    // The UI's assistant panel opens by default and hides half the chart: closed when present.
    await page
      .locator('button[aria-label*="lose" i]')
      .last()
      .click({ timeout: 5000 })
      .catch(() => undefined);
    await page.waitForTimeout(3000);
    await page.screenshot({ path: values.out! });
    console.log(`${values.out}: ${positionals.join(', ')} (${values.metric}) at ${page.url()}`);
  } finally {
    await browser.close();
  }
}

try {
  await main();
} finally {
  // The whole process group (the server's workers too); waited for, so the port is free for the next run.
  const exited = new Promise((resolve) => server.once('exit', resolve));
  process.kill(-server.pid!, 'SIGTERM');
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
}

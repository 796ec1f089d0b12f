import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { stringify } from 'yaml';
import { createCampaignActivities, type StepRecord } from '../activities/campaign-activities.ts';
import { withClient } from '../infra/control-database.ts';
import { controlReady } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * issue 21, "Workers are cattle": the bookkeeping worker is stateless, so one campaign's bookkeeping activities
 * may land on different workers, and a worker may be recreated with an empty state folder between stages. Here
 * worker A (its own state folder) selects the pool, aggregates an evaluation and computes the costs; its folder is
 * then removed, as a recreated container's layer would be; worker B (another, empty folder) must still find the
 * pool and write the report from them (the activity functions called directly, no Temporal).
 */

let controlUrl: string;
const inputs = testTempDir('tbt-cattle-inputs-');
const uids = ['cattle/a', 'cattle/b', 'cattle/c'];
/** Successes per uid over 2 repetitions: one hard, one medium, one easy task. */
const successes: Record<string, number> = { 'cattle/a': 0, 'cattle/b': 1, 'cattle/c': 2 };

before(async () => {
  controlUrl = await controlReady();
});

function usage(input: number, output: number) {
  return {
    policy: { calls: 1, input, output, cached: 0 },
    user: { calls: 0, input: 0, output: 0, cached: 0 },
    judge: { calls: 0, input: 0, output: 0, cached: 0 },
  };
}

function stepRecord(campaignId: string): StepRecord {
  return {
    campaignId,
    step: 1,
    groups: [{ uid: 'cattle/b', rewards: [1, 0], episodeIds: [] }],
    informativeGroups: 1,
    zeroVarianceGroups: 0,
    replacements: 0,
    lostGroups: 0,
    infraErrors: 0,
    leakedInfraEpisodes: 0,
    fallback: null,
    meanReward: 0.5,
    update: { loss: 0.1, grad_norm: 1, time_s: 60 },
    repeatedUpdate: false,
    checkpoint: 'step-1',
    exportPath: '/checkpoints/exports/step-1',
    weightVersion: 1,
    sampledWeightVersion: 0,
    staleEpisodes: 0,
    syncSeconds: [],
  };
}

/** Probe and evaluation episodes (2 repetitions per task) and one recorded step of the campaign. */
async function seedCampaign(campaignId: string): Promise<void> {
  await withClient(controlUrl, async (c) => {
    for (const [purpose, prefix] of [
      ['probe', `${campaignId}/probe`],
      ['eval', `${campaignId}/eval-after`],
    ] as const) {
      for (const uid of uids) {
        for (const rep of [0, 1]) {
          const outcome = rep < successes[uid]! ? 'success' : 'agent_failure';
          const record = {
            outcome,
            reward: outcome === 'success' ? 1 : 0,
            finishReason: 'done',
            usage: usage(1000, 100),
          };
          await c.query(
            `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, repetition, status,
               reward, finish_reason, record, finished_at)
             VALUES ($1, $2, 'cattle', 'sc', 'd', $3, $4, $5, $6, $7, 'done', $8, now()) ON CONFLICT (id) DO NOTHING`,
            [`${prefix}/${uid}#${rep}`, uid, purpose, campaignId, rep, outcome, record.reward, JSON.stringify(record)],
          );
        }
      }
    }
    await c.query(`INSERT INTO campaign_steps (campaign, step, record) VALUES ($1, 1, $2) ON CONFLICT DO NOTHING`, [
      campaignId,
      JSON.stringify(stepRecord(campaignId)),
    ]);
  });
}

test(
  'issue 21: a second bookkeeping worker with an empty state folder finds the pool and writes the report',
  { timeout: 180_000 },
  async () => {
    const campaignId = `cattle-${process.pid}-${Date.now() % 100_000}`;
    await seedCampaign(campaignId);
    try {
      await twoWorkers(campaignId);
    } finally {
      await withClient(controlUrl, async (c) => {
        for (const table of ['episodes', 'campaign_steps', 'campaign_files'])
          await c.query(`DELETE FROM ${table} WHERE campaign = $1`, [campaignId]).catch(() => undefined);
      });
    }
  },
);

async function twoWorkers(campaignId: string): Promise<void> {
  const prices = path.join(inputs, 'prices.yaml');
  const role = { input_per_million: 1, output_per_million: 4, cached_input_per_million: 0.5 };
  fs.writeFileSync(prices, stringify({ policy: role, user: role, judge: role }));

  const folderA = testTempDir('tbt-cattle-a-');
  const workerA = createCampaignActivities({ controlUrl, stateDir: folderA });
  await workerA.writeManifest({ campaignId, manifest: { campaignId, config: { name: 'cattle' } } });
  const selection = await workerA.selectPool({
    campaignId,
    idPrefix: `${campaignId}/probe`,
    minCleanRuns: 2,
    retainBands: ['hard', 'medium', 'easy'],
  });
  assert.ok(selection.pool.length > 0, 'the probe selected a pool');
  const evaluation = await workerA.aggregateEvaluation({
    campaignId,
    label: 'after',
    idPrefix: `${campaignId}/eval-after`,
    uids,
    repeats: 2,
  });
  const costs = await workerA.campaignCosts({ campaignId, prices, hourlyPriceUsd: 2, learnerProcesses: 1 });
  // Worker A's container is recreated: its folder, and every path it handed on, are gone.
  fs.rmSync(folderA, { recursive: true, force: true });

  const folderB = testTempDir('tbt-cattle-b-');
  const workerB = createCampaignActivities({ controlUrl, stateDir: folderB });
  const latest = await workerB.latestCheckpoint({ campaignId, needPool: true });
  assert.deepEqual(latest.pool, selection.pool, 'the selected pool, read on another worker');
  const report = await workerB.writeReport({
    campaignId,
    title: `Campaign ${campaignId}`,
    probe: selection.aggregates,
    after: evaluation.aggregate,
    costs,
  });
  assert.ok(report.markdown.startsWith(folderB), `the report is written in worker B's folder: ${report.markdown}`);
  const summary = fs.readFileSync(report.markdown, 'utf8');
  for (const part of ['## Probe difficulty', '## Training', '| pass@1 (evaluation) | 50.00% |', 'All-in cost'])
    assert.ok(summary.includes(part), `the report has its ${part}: ${summary.slice(0, 2000)}`);
  const pages = fs.readdirSync(path.join(path.dirname(report.html), 'episodes'));
  assert.ok(pages.length > 0, 'episode pages, from the evaluation result lines the aggregate names');

  // Tracking reads the campaign's manifest (its tracking section) on whichever worker records a step.
  await workerB.recordStep(stepRecord(campaignId));
  const manifest = path.join(folderB, 'campaigns', campaignId, 'manifest.json');
  assert.deepEqual(JSON.parse(fs.readFileSync(manifest, 'utf8')), { campaignId, config: { name: 'cattle' } });
}

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { writeCampaignManifest } from '../campaign-records/campaign-run-folder.ts';
import {
  localTrackingStores,
  trackEvaluation,
  trackOrWarn,
  trackStep,
  trackingAttempts,
} from '../campaign-records/experiment-tracking.ts';
import type { StepRecord } from '../campaign-records/step-record.ts';
import { readEnvironment, repoRoot } from '../config/environment.ts';
import { trackingPackageDir, trackingPythonBinary } from '../infra/python-env.ts';

/**
 * Experiment tracking through the real clients: two steps and an evaluation go to a temporary MLflow SQLite store
 * and a W&B offline run folder, are read back (MLflow's client API, W&B's own `.wandb` reader), and a repeat of
 * every call logs nothing.
 */

const campaignId = 'tracking-test-1';

function stepRecord(step: number, meanReward: number): StepRecord {
  return {
    campaignId,
    step,
    groups: [{ uid: 'a-1', rewards: [0, 1, 1, 0], episodeIds: ['e1', 'e2', 'e3', 'e4'] }],
    informativeGroups: 1,
    zeroVarianceGroups: 1,
    replacements: 1,
    lostGroups: 0,
    infraErrors: 2,
    leakedInfraEpisodes: 0,
    fallback: null,
    meanReward,
    update: { loss: 0.25 * step, grad_norm: 1.5, clip_fraction: 0.1, tokens: 900, time_s: 3.2 },
    repeatedUpdate: false,
    checkpoint: '/ckpt',
    exportPath: '/export',
    weightVersion: step,
    sampledWeightVersion: step - 1,
    staleEpisodes: 0,
    syncSeconds: [0.4, 0.7],
  };
}

interface ReadBack {
  mlflow: { runs: number; params: Record<string, string>; metrics: Record<string, [number, number][]> };
  wandb: { files: number; history: Record<string, number>[] };
}

function readBack(stateDir: string, campaign = campaignId): ReadBack {
  const stores = localTrackingStores(stateDir);
  const out = execFileSync(
    trackingPythonBinary(),
    ['-m', 'tbt_tracking.read_back', '--campaign', campaign, '--mlflow-uri', stores.mlflowUri],
    { cwd: trackingPackageDir, encoding: 'utf8', env: { ...process.env, MLFLOW_TRACKING_URI: '' } },
  );
  const wandb = execFileSync(
    trackingPythonBinary(),
    ['-m', 'tbt_tracking.read_back', '--campaign', campaign, '--wandb-dir', stores.wandbDir],
    { cwd: trackingPackageDir, encoding: 'utf8' },
  );
  return { ...JSON.parse(out.trim().split('\n').pop()!), ...JSON.parse(wandb.trim().split('\n').pop()!) };
}

test(
  'two steps and an evaluation reach MLflow and W&B once, however often they are logged',
  { timeout: 600_000 },
  async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-tracking-'));
    const deps = { stateDir };
    const config = {
      name: 'tracking-test',
      training: { group_size: 4 },
      tracking: { mlflow: {}, wandb: { mode: 'offline' } },
    };
    writeCampaignManifest(stateDir, campaignId, { campaignId, config });
    // MLFLOW_TRACKING_URI of the caller would win over the local store: this test wants the local one.
    delete process.env.MLFLOW_TRACKING_URI;

    const first = await trackStep(deps, stepRecord(1, 0.25));
    assert.equal(first?.mlflow?.skipped, 0);
    assert.ok((first?.mlflow?.logged ?? 0) >= 15, JSON.stringify(first));
    assert.equal(first?.wandb?.logged, first?.mlflow?.logged);
    await trackStep(deps, stepRecord(2, 0.75));
    const aggregate = path.join(repoRoot, 'test', 'fixtures', 'report', 'eval-after.json');
    const evaluation = await trackEvaluation(deps, { campaignId, aggregate, stepsTrained: 2 });
    assert.ok((evaluation?.mlflow?.logged ?? 0) >= 10, JSON.stringify(evaluation));

    // A retried activity or a resumed campaign: the same calls again log nothing.
    for (const again of [
      await trackStep(deps, stepRecord(1, 0.25)),
      await trackStep(deps, stepRecord(2, 0.75)),
      await trackEvaluation(deps, { campaignId, aggregate, stepsTrained: 2 }),
    ]) {
      assert.equal(again?.mlflow?.logged, 0, JSON.stringify(again));
      assert.equal(again?.wandb?.logged, 0, JSON.stringify(again));
    }

    const back = readBack(stateDir);
    assert.equal(back.mlflow.runs, 1, 'one MLflow run per campaign');
    assert.equal(back.mlflow.params['config.training.group_size'], '4', 'the manifest is the run params');
    assert.deepEqual(back.mlflow.metrics['train/mean_reward'], [
      [1, 0.25],
      [2, 0.75],
    ]);
    assert.deepEqual(back.mlflow.metrics['train/loss'], [
      [1, 0.25],
      [2, 0.5],
    ]);
    assert.deepEqual(back.mlflow.metrics['train/infra_refills'], [
      [1, 2],
      [2, 2],
    ]);
    assert.deepEqual(
      back.mlflow.metrics['train/sync_s']?.map(([, v]) => v),
      [0.7, 0.7],
    );
    assert.deepEqual(
      back.mlflow.metrics['eval/pass_at_1']?.map(([s, v]) => [s, Number(v.toFixed(6))]),
      [[2, 0.7]],
    );
    assert.deepEqual(
      back.mlflow.metrics['eval/pass_hat_5']?.map(([s]) => s),
      [2],
    );

    // W&B: each call that logged is a resumed offline run with its own transaction log; repeats made none.
    assert.equal(back.wandb.files, 3);
    const steps = back.wandb.history.filter((row) => 'train/step' in row);
    assert.deepEqual(
      steps.map((row) => [row['train/step'], row['train/mean_reward'], row['train/loss']]),
      [
        [1, 0.25, 0.25],
        [2, 0.75, 0.5],
      ],
    );
    const evals = back.wandb.history.filter((row) => 'eval/step' in row);
    assert.equal(evals.length, 1);
    assert.equal(Number(evals[0]!['eval/pass_at_1']!.toFixed(6)), 0.7);
    fs.rmSync(stateDir, { recursive: true, force: true });
  },
);

test(
  'a tracker that cannot be reached fails the early attempts and warns on the last',
  { timeout: 300_000 },
  async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-tracking-down-'));
    // Port 9 (discard) on loopback: nothing listens, so every MLflow request is refused.
    const tracking = { mlflow: { tracking_uri: 'http://user:secret@127.0.0.1:9' } };
    writeCampaignManifest(stateDir, campaignId, { campaignId, config: { tracking } });
    const env = { ...process.env };
    process.env.MLFLOW_HTTP_REQUEST_MAX_RETRIES = '0';
    process.env.MLFLOW_HTTP_REQUEST_TIMEOUT = '5';
    try {
      const work = () => trackStep({ stateDir }, stepRecord(1, 0.5));
      await assert.rejects(
        trackOrWarn(work, 1, () => assert.fail('no warning before the last attempts')),
        (e) => {
          assert.match(String(e), /experiment tracking failed: mlflow/);
          assert.doesNotMatch(String(e), /secret/, 'the URI password never reaches the error');
          return true;
        },
      );
      const warnings: string[] = [];
      await trackOrWarn(work, trackingAttempts, (message) => warnings.push(message));
      assert.deepEqual(warnings, ['experiment tracking failed; the campaign goes on without it']);
    } finally {
      process.env = env;
      fs.rmSync(stateDir, { recursive: true, force: true });
    }
  },
);

test('the newest demo campaign: MLflow and the W&B offline folder hold the steps of its steps.jsonl', async (t) => {
  const stateDir = readEnvironment().TBT_STATE_DIR;
  const campaigns = path.join(stateDir, 'campaigns');
  const demos = fs.existsSync(campaigns)
    ? fs
        .readdirSync(campaigns)
        .filter((name) => name.startsWith('local-demo-') && fs.existsSync(path.join(campaigns, name, 'steps.jsonl')))
        .filter((name) => fs.readFileSync(path.join(campaigns, name, 'manifest.json'), 'utf8').includes('"tracking"'))
        .sort()
    : [];
  if (!demos.length) return t.skip('no finished demo campaign with tracking in this state folder (`npm run demo`)');
  const demo = demos.at(-1)!;
  const steps = fs
    .readFileSync(path.join(campaigns, demo, 'steps.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { step: number; mean_reward: number; loss: number });
  const back = readBack(stateDir, demo);
  assert.deepEqual(
    back.mlflow.metrics['train/mean_reward'],
    steps.map((s) => [s.step, s.mean_reward]),
  );
  const rows = back.wandb.history.filter((row) => 'train/step' in row);
  assert.deepEqual(
    rows.map((row) => [row['train/step'], row['train/mean_reward'], row['train/loss']]),
    steps.map((s) => [s.step, s.mean_reward, s.loss]),
  );
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse, stringify } from 'yaml';
import { campaignTracking, flattenParams } from '../../campaign-records/experiment-tracking.ts';
import type { StepRecord } from '../../campaign-records/step-record.ts';
import { trackingEntryOfEvaluation, trackingEntryOfStep } from '../../campaign-records/tracking-metrics.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const record: StepRecord = {
  campaignId: 'c',
  step: 3,
  groups: [
    { uid: 'a', rewards: [0, 1], episodeIds: ['1', '2'] },
    { uid: 'b', rewards: [1, 1], episodeIds: ['3', '4'] },
  ],
  informativeGroups: 1,
  zeroVarianceGroups: 3,
  replacements: 2,
  lostGroups: 1,
  infraErrors: 4,
  leakedInfraEpisodes: 0,
  fallback: 'keep_zero_variance',
  meanReward: 0.75,
  update: { loss: 0.5, grad_norm: 2, clip_fraction: 0.25, tokens: 100, time_s: 7, note: 'text is not a metric' },
  repeatedUpdate: true,
  checkpoint: '',
  exportPath: '',
  weightVersion: 3,
  sampledWeightVersion: 1,
  staleEpisodes: 2,
  syncSeconds: [1, 3],
};

test('a step record becomes train/* metrics at its step: selection, learner, weights, lag and sync', () => {
  const entry = trackingEntryOfStep(record);
  assert.equal(entry.kind, 'step');
  assert.equal(entry.step, 3);
  const m = entry.metrics;
  assert.equal(m['train/mean_reward'], 0.75);
  assert.equal(m['train/episodes'], 4);
  assert.equal(m['train/informative_group_fraction'], 0.25);
  assert.equal(m['train/infra_refills'], 4);
  assert.equal(m['train/replacements'], 2);
  assert.equal(m['train/loss'], 0.5);
  assert.equal(m['train/clip_fraction'], 0.25);
  assert.equal(m['train/grad_norm'], 2);
  assert.equal(m['train/tokens'], 100);
  assert.equal(m['train/update_s'], 7);
  assert.equal(m['train/weight_lag'], 1, 'sampled from version 1 for the update of step 3 (version 2 -> 3)');
  assert.equal(m['train/sync_s'], 3, 'the slowest server');
  assert.equal(m['train/repeated_update'], 1);
  assert.equal(m['train/note'], undefined);
  assert.ok(Object.values(m).every(Number.isFinite));
});

test('an evaluation aggregate becomes eval/* metrics at the steps trained: pass@1, pass@k, pass^k, k/k, costs', () => {
  const aggregate = JSON.parse(fs.readFileSync(path.join(repoRoot, 'test/fixtures/report/eval-after.json'), 'utf8'));
  const entry = trackingEntryOfEvaluation(aggregate, 2);
  assert.deepEqual([entry.kind, entry.step], ['evaluation', 2]);
  const m = entry.metrics;
  assert.ok(Math.abs(m['eval/pass_at_1']! - 0.7) < 1e-9);
  assert.ok(Math.abs(m['eval/pass_at_5']! - 0.9166666666666666) < 1e-9);
  assert.equal(m['eval/pass_hat_5'], 0.5);
  assert.deepEqual([m['eval/all_pass_k'], m['eval/all_pass_tasks'], m['eval/all_pass_rate']], [5, 6, 0.5]);
  // Named for whose tokens they count: policy only (the reference's figure) and all roles (+ user, judge).
  assert.equal(m['eval/campaign_cost_policy_only_usd'], 0.2334);
  assert.equal(m['eval/cost_per_successful_attempt_policy_only_usd'], 0.2334 / 42);
  assert.equal(m['eval/cost_per_reliable_task_policy_only_usd'], 0.2334 / 6);
  assert.equal(m['eval/campaign_cost_all_roles_usd'], 0.291);
  assert.equal(m['eval/cost_per_successful_attempt_all_roles_usd'], 0.291 / 42);
  assert.equal(m['eval/cost_per_reliable_task_all_roles_usd'], 0.291 / 6);
  assert.equal(m['eval/cost_policy_usd'], 0.2334);
  assert.equal(m['eval/cost_usd'], undefined, 'no figure without its scope');
});

test('an aggregate written before the policy-only figures logs no policy-only cost, and no unscoped one', () => {
  const aggregate = JSON.parse(
    fs.readFileSync(path.join(repoRoot, 'test/fixtures/report/eval-after-schema1.json'), 'utf8'),
  );
  const m = trackingEntryOfEvaluation(aggregate, 2).metrics;
  assert.deepEqual(
    Object.keys(m).filter((k) => k.includes('cost')),
    ['eval/cost_judge_usd', 'eval/cost_policy_usd', 'eval/cost_user_usd'],
  );
});

test('the manifest flattens into params; a bad tracking section is an error naming the field', () => {
  assert.deepEqual(flattenParams({ config: { training: { steps: 2 }, retain: ['hard'], name: 'x' } }), {
    'config.training.steps': '2',
    'config.retain': '["hard"]',
    'config.name': 'x',
  });
  const state = testTempDir('tbt-tracking-');
  const dir = path.join(state, 'campaigns', 'c');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify({ config: { tracking: { mlflow: { port: 1 } } } }));
  assert.throws(() => campaignTracking(state, 'c'), /campaign config field tracking\.mlflow: .*port/);
  fs.writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify({ config: {} }));
  assert.equal(campaignTracking(state, 'c'), undefined, 'off unless configured');

  const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
  assert.ok(doc.tracking?.mlflow, 'the demo turns MLflow on');
  doc.tracking = { wandb: { mode: 'sometimes' } };
  const file = path.join(state, 'campaign.yaml');
  fs.writeFileSync(file, stringify(doc));
  assert.throws(() => loadCampaignConfig(file), /campaign\.yaml:\d+: tracking\.wandb\.mode: /);
});

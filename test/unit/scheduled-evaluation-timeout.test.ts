import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { evaluationRunTimeoutMs } from '../../cli/evaluation-run-timeout.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { evaluationOutageWaits } from '../../workflows/scheduled-evaluation-workflow.ts';

/**
 * The run timeout of `tbt eval run` and of each run a `tbt eval schedule` starts is sized to the work (tasks x
 * repeats in waves of `evaluation.concurrency` per shard, each episode up to its wall clock plus set-up and
 * grading, one chain of re-runs, then the server start and the aggregation), not a flat 24 hours: a reference
 * evaluation is not cut off part-way, and a small one stuck on a queue without a worker ends within hours.
 */

const hour = 3_600_000;
const local = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
const reference = loadCampaignConfig(path.join(repoRoot, 'config', 'reference-q38.yaml'));

test('the local evaluation: 24 keys in 6 waves of 4 episodes of at most 9 minutes, one re-run chain, 90 min', () => {
  // 1.25 x 6 x 9 min + 3 x (9 + 5) min + 90 min = 67.5 + 42 + 90 minutes
  assert.equal(
    evaluationRunTimeoutMs({ config: local, tasks: 12, repeats: 2, outageWaits: undefined }),
    (67.5 + 42 + 90) * 60_000,
  );
});

test('a reference evaluation (507 tasks x 20, 128 in flight, 30-minute episodes) gets days, not 24 hours', () => {
  const outageWaits = evaluationOutageWaits(reference);
  const ms = evaluationRunTimeoutMs({ config: reference, tasks: 507, repeats: 20, outageWaits });
  assert.ok(ms > 48 * hour && ms < 4 * 24 * hour, `${ms / hour} h`);
});

test('more tasks or repeats take longer, more concurrency less; partly filled shards count whole waves', () => {
  const base = evaluationRunTimeoutMs({ config: local, tasks: 100, repeats: 4, outageWaits: undefined });
  assert.ok(evaluationRunTimeoutMs({ config: local, tasks: 200, repeats: 4, outageWaits: undefined }) > base);
  assert.ok(evaluationRunTimeoutMs({ config: local, tasks: 100, repeats: 8, outageWaits: undefined }) > base);
  const wider = { ...local, evaluation: { ...local.evaluation, concurrency: 16 } };
  assert.ok(evaluationRunTimeoutMs({ config: wider, tasks: 100, repeats: 4, outageWaits: undefined }) < base);
  // 400 keys, 16 in flight: 25 waves in one shard; in shards of 30 keys, 13 shards of 2 waves and one of 1 (27).
  const oneShard = evaluationRunTimeoutMs({ config: wider, tasks: 100, repeats: 4, outageWaits: undefined });
  const small = { ...wider, evaluation: { ...wider.evaluation, shard_size: 30 } };
  const episodeMs = local.episode.limits.wall_clock_ms + 5 * 60_000;
  assert.equal(
    evaluationRunTimeoutMs({ config: small, tasks: 100, repeats: 4, outageWaits: undefined }) - oneShard,
    1.25 * 2 * episodeMs,
  );
});

test('each outage wait adds its wait and another pass over the keys that are still failing', () => {
  const outageWaits = evaluationOutageWaits(local);
  const waited = evaluationRunTimeoutMs({ config: local, tasks: 12, repeats: 2, outageWaits });
  const plain = evaluationRunTimeoutMs({ config: local, tasks: 12, repeats: 2, outageWaits: undefined });
  // 5 + 10 + 20 + 40 minutes of waiting, then 4 passes of one episode and its 3 re-runs: 4 x (9 + 3 x 14) minutes.
  assert.equal(waited - plain, (75 + 4 * (9 + 42)) * 60_000);
});

test('zero tasks is refused, not sized', () => {
  assert.throws(
    () => evaluationRunTimeoutMs({ config: local, tasks: 0, repeats: 2, outageWaits: undefined }),
    /tasks: expected >= 1/,
  );
});

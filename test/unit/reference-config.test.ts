import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { createCampaignActivities } from '../../activities/campaign-activities.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { learnerPlaceholders } from '../../config/learner-topology.ts';
import { runEvaluation } from '../../cli/commands/campaign.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The shipped reference run (config/reference-q38.yaml) as an operator first meets it: it loads, its dry run prints
 * one torchrun command per node (3 nodes x 8 ranks) with the hosts still to fill in shown as placeholders, nothing
 * starts until they are filled, and it evaluates on a benchmark that is never in its training pool.
 */

const configFile = path.join(repoRoot, 'config', 'reference-q38.yaml');

test('the reference config loads: 3 nodes x 8 GPUs, hosts as placeholders, held-out evaluation', () => {
  const config = loadCampaignConfig(configFile);
  assert.equal(config.learner.nodes, 3);
  assert.equal(config.learner.gpus_per_node, 8);
  assert.equal(config.evaluation.tasks, 'held_out');
  const placeholders = learnerPlaceholders(config.learner);
  assert.deepEqual(placeholders.map((p) => p.field).sort(), [
    'learner.gpu_workers[0].host',
    'learner.gpu_workers[1].host',
    'learner.gpu_workers[2].host',
    'learner.rdzv_endpoint',
  ]);
});

test('dry run of the reference config: 3 torchrun commands, 8 ranks each, placeholders named', () => {
  const env = { ...process.env, TBT_STATE_DIR: testTempDir('tbt-reference-dry-run-') };
  const out = execFileSync(path.join(repoRoot, 'bin', 'tbt'), ['train', '--config', configFile, '--dry-run'], {
    encoding: 'utf8',
    env,
    cwd: repoRoot,
  });
  const commands = out.split('\n').filter((l) => l.trim().startsWith('python -m tbt_gpu.learner.bound_torchrun '));
  assert.equal(commands.length, 3, out);
  for (const [rank, line] of commands.entries()) {
    assert.match(line, /--nnodes 3 /);
    assert.match(line, /--nproc-per-node 8 /);
    assert.match(line, new RegExp(`--node-rank ${rank} `));
    assert.match(line, /--rdzv-endpoint '<node-0-host>:29400' /);
  }
  assert.match(out, /placeholders +<node-0-host>, <node-1-host>, <node-2-host>/);
  assert.match(out, /learner node 2: started by the GPU worker of host <node-2-host> \(placeholder\)/);
  assert.match(out, /evaluation +held-out tasks only \(uids in \S+benchmark-uids\.yaml and the suite's /);
  assert.match(out, /: \d+ tasks x 20 repeats before and after training, 0 of them in any training pool \(\d+ /);
  assert.match(out, /judge mode +probe legacy, training motivation, evaluation legacy\n/, "the reference's modes");
  // The memory model of the learner's own code at 24 ranks: the 106k-token budget fits with context_parallel 8.
  assert.match(
    out,
    /memory +26\.9B parameters on 24 ranks: [\d.]+ GiB per GPU at 106496 tokens \(limit 75\).*: fits\n/,
  );
});

test('a real start of the reference config refuses its placeholders, naming the field', async () => {
  await assert.rejects(
    runEvaluation(['--config', configFile]),
    /reference-q38\.yaml: field learner\.rdzv_endpoint: "<node-0-host>:29400" is a placeholder/,
  );
});

test('the reference config evaluates a benchmark it never trains on', () => {
  const config = loadCampaignConfig(configFile);
  const excludeFile = path.join(repoRoot, config.exclude_uids!);
  const benchmark = parse(fs.readFileSync(excludeFile, 'utf8')) as string[];
  assert.ok(Array.isArray(benchmark) && benchmark.length > 0, 'the benchmark list is not empty');
  const stateDir = testTempDir('tbt-reference-ingest-');
  const activities = createCampaignActivities({ controlUrl: 'postgres://unused', stateDir });
  return activities
    .ingestCandidates({
      campaignId: 'reference-q38-check',
      suiteDir: path.join(repoRoot, config.suite),
      excludeUidsFile: excludeFile,
      evaluationTasks: config.evaluation.tasks,
    })
    .then((r) => {
      assert.deepEqual(r.heldOutUids, [...benchmark].sort(), 'every benchmark uid is a suite task, evaluated');
      assert.ok(r.uids.length > 0, 'a training pool remains');
      const trained = new Set(r.uids);
      assert.deepEqual(
        r.heldOutUids.filter((u) => trained.has(u)),
        [],
        'no evaluated uid is a training candidate',
      );
    });
});

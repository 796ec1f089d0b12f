import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse, stringify } from 'yaml';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { learnerFiles } from '../../learner-control/learner-process.ts';
import { learnerLaunch, torchrunArgs } from '../../learner-control/learner-launch.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The learner's topology is checked when `tbt train` reads the campaign (bad input naming the field and its line),
 * and the dry run prints, per node, the very torchrun command that node's GPU worker runs.
 */

function campaignWith(learner: Record<string, unknown>): string {
  const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
  doc.learner = { ...doc.learner, ...learner };
  doc.suite = path.join(repoRoot, 'tasks', 'tiny');
  doc.prices = path.join(repoRoot, 'config', 'prices-local.yaml');
  const file = path.join(testTempDir('tbt-topology-'), 'campaign.yaml');
  fs.writeFileSync(file, stringify(doc));
  return file;
}

const twoNodes = {
  nodes: 2,
  gpus_per_node: 1,
  rdzv_endpoint: '10.0.0.1:29400',
  gpu_workers: [
    { host: 'node-a', node_rank: 0 },
    { host: 'node-b', node_rank: 1 },
  ],
};

for (const [what, learner, field] of [
  ['a world size that is not nodes x gpus_per_node', { ...twoNodes, world_size: 3 }, 'learner\\.world_size'],
  ['several nodes without a rendezvous', { ...twoNodes, rdzv_endpoint: undefined }, 'learner\\.rdzv_endpoint'],
  ['a rendezvous that is not host:port', { ...twoNodes, rdzv_endpoint: 'node-a' }, 'learner\\.rdzv_endpoint'],
  ['several nodes without their GPU workers', { ...twoNodes, gpu_workers: undefined }, 'learner\\.gpu_workers'],
  [
    'fewer GPU workers than nodes',
    { ...twoNodes, nodes: 3, gpu_workers: twoNodes.gpu_workers },
    'learner\\.gpu_workers',
  ],
  [
    'a node rank given twice',
    { ...twoNodes, gpu_workers: [twoNodes.gpu_workers[0], { host: 'node-b', node_rank: 0 }] },
    'learner\\.gpu_workers\\[1\\]\\.node_rank',
  ],
  [
    'a node rank outside 0..nodes-1',
    { ...twoNodes, gpu_workers: [twoNodes.gpu_workers[0], { host: 'node-b', node_rank: 2 }] },
    'learner\\.gpu_workers\\[1\\]\\.node_rank',
  ],
  [
    'one GPU worker for two nodes',
    { ...twoNodes, gpu_workers: [twoNodes.gpu_workers[0], { host: 'node-a', node_rank: 1 }] },
    'learner\\.gpu_workers\\[1\\]\\.host',
  ],
] as const) {
  test(`topology: ${what} is bad input naming ${field.replace(/\\/g, '')}`, () => {
    const file = campaignWith(learner);
    assert.throws(
      () => loadCampaignConfig(file),
      (err: Error) => {
        assert.match(err.message, new RegExp(`campaign\\.yaml:\\d+: ${field}: `));
        return true;
      },
    );
  });
}

test('topology: a learner started outside needs no GPU workers or rendezvous', () => {
  const attach = { nodes: 3, gpus_per_node: 8, attach_url: 'http://10.0.0.1:7000' };
  assert.throws(() => loadCampaignConfig(campaignWith(attach)), /learner\.attach_token_file: required with attach_url/);
  const config = loadCampaignConfig(campaignWith({ ...attach, attach_token_file: '/shared/control.token' }));
  assert.equal(config.learner.attach_url, 'http://10.0.0.1:7000');
});

test('dry run: one launch command per node, the one its GPU worker runs', () => {
  const file = campaignWith(twoNodes);
  const env = { ...process.env, TBT_STATE_DIR: testTempDir('tbt-topology-state-') };
  const out = execFileSync(
    process.execPath,
    ['--import', 'tsx', path.join(repoRoot, 'cli', 'tbt.ts'), 'train', '--config', file, '--id', 'c1', '--dry-run'],
    { encoding: 'utf8', env, cwd: repoRoot },
  );
  assert.match(out, /learner node 0: started by the GPU worker of host node-a \(queue \S+-gpu-node-a\)/);
  assert.match(out, /learner node 1: started by the GPU worker of host node-b \(queue \S+-gpu-node-b\)/);
  const launcher = 'python -m tbt_gpu.learner.bound_torchrun';
  const commands = out.split('\n').filter((l) => l.trim().startsWith(`${launcher} `));
  assert.equal(commands.length, 2, out);
  const config = loadCampaignConfig(file);
  const configPath = learnerFiles(env.TBT_STATE_DIR, 'c1').config;
  for (const [rank, line] of commands.entries()) {
    const args = torchrunArgs(learnerLaunch(config.learner, 'c1', rank), configPath);
    assert.equal(line.trim(), [launcher, ...args].join(' '));
    assert.ok(args.includes('c10d') && args.includes('10.0.0.1:29400'));
  }
});

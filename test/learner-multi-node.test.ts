import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { learnerSchema } from '../config/campaign-config.ts';
import { createGpuActivities } from '../activities/gpu-activities.ts';
import { freePort } from '../infra/embedded-policy-server.ts';
import { learnerRequest } from '../learner-control/learner-client.ts';
import { controlEndpoint, learnerFiles, stopLearner } from '../learner-control/learner-process.ts';
import { withClient } from '../infra/control-database.ts';
import { isAlive, readPid } from '../infra/daemon.ts';
import { controlReady } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * A learner over two nodes of one rank each (gloo, CPU, the real small model), started through two GPU workers'
 * activities (two createGpuActivities instances sharing the learner folder, as nodes share a filesystem): node 1's
 * worker starts its torchrun, node 0's waits until both ranks have joined the c10d rendezvous; then a training
 * step, an export and the shutdown of both nodes.
 */

const stateDir = testTempDir('tbt-multinode-');
const campaignId = `test-multinode-${process.pid}`;
let controlUrlDb: string;

before(async () => {
  controlUrlDb = await controlReady();
});
after(async () => {
  await stopLearner(learnerFiles(stateDir, campaignId)).catch(() => undefined);
});

function act<R>(fn: () => Promise<R>): Promise<R> {
  return new MockActivityEnvironment().run(fn) as Promise<R>;
}

async function insertEpisodes(step: number, count: number): Promise<{ episodeId: string; advantage: number }[]> {
  const items = Array.from({ length: count }, (_, i) => ({
    episodeId: `${campaignId}/step-${step}/t#${i}`,
    advantage: i % 2 === 0 ? 1 : -1,
  }));
  await withClient(controlUrlDb, async (c) => {
    for (const [i, item] of items.entries()) {
      const tokenIds = Array.from({ length: 24 }, (_, k) => 100 + ((i * 31 + k * 7) % 4000));
      const trajectory = {
        tokenIds,
        lossMask: tokenIds.map((_, k) => (k >= 12 ? 1 : 0)),
        logprobs: tokenIds.map(() => 0),
      };
      await c.query(
        `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, step, status, reward, record)
         VALUES ($1, 't', 's', 'sc', 'd', 'train', $2, $3, 'success', 1, $4) ON CONFLICT (id) DO NOTHING`,
        [item.episodeId, campaignId, step, JSON.stringify({ trajectory })],
      );
    }
  });
  return items;
}

test(
  '2 nodes x 1 rank: each GPU worker starts its node, rank 0 is on node 0, a step trains on both',
  { timeout: 900_000 },
  async () => {
    const learner = learnerSchema.parse({
      lr: 1e-4,
      micro_batch_tokens: 1024,
      nodes: 2,
      gpus_per_node: 1,
      rdzv_endpoint: `127.0.0.1:${await freePort()}`,
      gpu_workers: [
        { host: 'node-a', node_rank: 0 },
        { host: 'node-b', node_rank: 1 },
      ],
    });
    const node0 = createGpuActivities({ stateDir, controlUrl: controlUrlDb });
    const node1 = createGpuActivities({ stateDir, controlUrl: controlUrlDb });
    const input = { campaignId, learner, seed: 1 };
    // Node 1 first, as a slow node 0 would find it: its ranks wait in the rendezvous until node 0 joins.
    const second = await act(() => node1.startLearnerNode({ ...input, nodeRank: 1 }));
    assert.equal(second.started, true);
    const started = await act(() => node0.startLearner(input));
    assert.equal((started.manifest.distributed as { world_size: number }).world_size, 2);
    const health = await learnerRequest<{ world_size: number; pid: number }>(
      controlEndpoint(learnerFiles(stateDir, campaignId))!,
      'GET',
      '/health',
    );
    assert.equal(health.world_size, 2);
    const files0 = learnerFiles(stateDir, campaignId, 0);
    const files1 = learnerFiles(stateDir, campaignId, 1);
    assert.notEqual(files0.pid, files1.pid, 'each node has its own pid and log file');
    // Rank 0 (which serves the control endpoint) is node 0's, whatever order the rendezvous gave the nodes.
    const node0Ranks = fs.readFileSync(files0.log, 'utf8');
    const node1Ranks = fs.readFileSync(files1.log, 'utf8');
    assert.match(node0Ranks, /rank 0\/2 joined/);
    assert.match(node1Ranks, /rank 1\/2 joined/);
    // Found again, not started twice.
    assert.equal((await act(() => node1.startLearnerNode({ ...input, nodeRank: 1 }))).started, false);

    const step = await act(async () => node0.trainStep({ ...input, stepId: 1, items: await insertEpisodes(1, 4) }));
    assert.equal(step.stepId, 1);
    assert.ok(Number.isFinite(Number(step.metrics.loss)));
    const exported = await act(() => node0.exportWeights({ campaignId, stepId: 1 }));
    assert.ok(fs.readdirSync(exported.path).some((f) => f.endsWith('.safetensors')));

    await assert.rejects(
      act(() => node1.startLearnerNode({ ...input, nodeRank: 2 })),
      /node rank 2: outside 1\.\.1/,
    );
    const pids = [readPid(files0.pid)!, readPid(files1.pid)!];
    await act(() => node0.stopLearner({ campaignId }));
    assert.equal(
      controlEndpoint(files0) === undefined || !fs.existsSync(path.join(files0.checkpoints, 'control.json')),
      true,
    );
    for (const pid of pids) assert.equal(isAlive(pid), false, `torchrun ${pid} stopped`);
  },
);

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { CancelledFailure } from '@temporalio/common';
import { learnerSchema } from '../config/campaign-config.ts';
import { createGpuActivities } from '../activities/gpu-activities.ts';
import { learnerRequest } from '../learner-control/learner-client.ts';
import { learnerFiles, controlEndpoint, stopLearner } from '../learner-control/learner-process.ts';
import { policyTokenFile } from '../learner-control/policy-sync-token.ts';
import { isAlive, readPid } from '../infra/daemon.ts';
import { diskUsage } from '../infra/retention.ts';
import { controlReady } from './helpers/stack.ts';
import { insertSyntheticEpisodes } from './helpers/synthetic-episodes.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * The GPU worker's activities against a real torchrun learner (gloo, CPU) training the real small model:
 * steps by reference to episode rows, heartbeats, exactly-once after kill -9, cancellation, export.
 */

const stateDir = testTempDir('tbt-gpu-');
const campaignId = `test-gpu-${process.pid}`;
const learner = learnerSchema.parse({ lr: 1e-4, micro_batch_tokens: 1024 });
let controlUrlDb: string;
let activities: ReturnType<typeof createGpuActivities>;

function insertEpisodes(step: number, count: number, length = 24, campaign = campaignId) {
  return insertSyntheticEpisodes(controlUrlDb, campaign, step, count, length);
}

function run<R>(
  fn: () => Promise<R>,
  env = new MockActivityEnvironment(),
): { env: MockActivityEnvironment; heartbeats: unknown[]; result: Promise<R> } {
  const heartbeats: unknown[] = [];
  env.on('heartbeat', (d: unknown) => heartbeats.push(d));
  return { env, heartbeats, result: env.run(fn) };
}

before(async () => {
  controlUrlDb = await controlReady();
  activities = createGpuActivities({ stateDir, controlUrl: controlUrlDb });
});
after(async () => {
  await stopLearner(learnerFiles(stateDir, campaignId)).catch(() => undefined);
});

test(
  'train steps apply exactly once, survive a kill -9 of the learner, and export a serving copy',
  { timeout: 900_000 },
  async () => {
    const started = await run(() => activities.startLearner({ campaignId, learner, seed: 1 })).result;
    assert.equal((started.manifest.optimizer as { lr: number }).lr, 1e-4);
    assert.equal((started.manifest.optimizer as { weight_decay: number }).weight_decay, 0);

    const first = run(async () =>
      activities.trainStep({ campaignId, stepId: 1, items: await insertEpisodes(1, 4), learner, seed: 1 }),
    );
    const r1 = await first.result;
    assert.equal(r1.stepId, 1);
    assert.equal(r1.repeated, false);
    assert.ok(Number.isFinite(Number(r1.metrics.loss)));

    const again = await run(async () =>
      activities.trainStep({ campaignId, stepId: 1, items: await insertEpisodes(1, 4), learner, seed: 1 }),
    ).result;
    assert.equal(again.repeated, true, 'a repeated step id returns the stored result');
    assert.deepEqual(again.metrics, r1.metrics);

    // kill -9 the whole learner process group; the next step restarts it from its checkpoint and applies once.
    const files = learnerFiles(stateDir, campaignId);
    const pid = readPid(files.pid)!;
    const rankZero = (
      JSON.parse(fs.readFileSync(path.join(files.checkpoints, 'control.json'), 'utf8')) as { pid: number }
    ).pid;
    process.kill(-pid, 'SIGKILL'); // torchrun's group; its ranks live in their own sessions and survive this
    await new Promise((r) => setTimeout(r, 1000));
    const r2 = await run(async () =>
      activities.trainStep({ campaignId, stepId: 2, items: await insertEpisodes(2, 4), learner, seed: 1 }),
    ).result;
    assert.equal(r2.repeated, false);
    assert.notEqual(readPid(files.pid), pid, 'a new learner process');
    assert.equal(isAlive(rankZero), false, 'the orphaned rank 0 of the killed learner was stopped before the restart');
    const health = await learnerRequest<{ step: number }>(controlEndpoint(files)!, 'GET', '/health');
    assert.equal(health.step, 2);

    // Out of order is refused without retries (bad input, not infrastructure).
    await assert.rejects(
      run(async () =>
        activities.trainStep({ campaignId, stepId: 5, items: await insertEpisodes(5, 2), learner, seed: 1 }),
      ).result,
      /step 5 refused: last applied step is 2/,
    );

    const exported = await run(() => activities.exportWeights({ campaignId, stepId: 2 })).result;
    assert.ok(fs.existsSync(path.join(exported.path, 'config.json')));
    assert.ok(fs.readdirSync(exported.path).some((f) => f.endsWith('.safetensors')));

    // Retention (finding 16): a batch goes once a checkpoint holds its step; the disk one step costs, measured.
    const batches = path.join(files.dir, 'batches');
    assert.deepEqual(
      fs.readdirSync(batches).filter((f) => /^step-[12]\.jsonl$/.test(f)),
      [],
      'batches of committed steps are removed',
    );
    const perStep = {
      checkpointBytes: diskUsage(path.join(files.checkpoints, 'step-2')),
      exportBytes: diskUsage(exported.path),
    };
    console.log(`disk per step (real small model, CPU, float32): ${JSON.stringify(perStep)}`);
    assert.ok(perStep.exportBytes > 0 && perStep.checkpointBytes > 0);
  },
);

test(
  'cancelling a running step reaches the learner: nothing is applied, and heartbeats flowed meanwhile',
  { timeout: 900_000 },
  async () => {
    const items = await insertEpisodes(3, 48, 400);
    const job = run(() =>
      activities.trainStep({ campaignId, stepId: 3, items, learner: { ...learner, micro_batch_tokens: 400 }, seed: 1 }),
    );
    await new Promise((r) => setTimeout(r, 7000));
    job.env.cancel();
    await assert.rejects(job.result, (err: unknown) => err instanceof CancelledFailure);
    assert.ok(job.heartbeats.length >= 1, 'heartbeats while the step runs');
    const files = learnerFiles(stateDir, campaignId);
    let health = await learnerRequest<{ step: number; busy: boolean }>(controlEndpoint(files)!, 'GET', '/health');
    for (let i = 0; health.busy && i < 120; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      health = await learnerRequest(controlEndpoint(files)!, 'GET', '/health');
    }
    assert.equal(health.step, 2, 'the cancelled step 3 was not applied');
  },
);

test(
  'a GPU worker shut down mid-step leaves the learner running it; the retry picks the step up where it is',
  { timeout: 900_000 },
  async () => {
    const items = (await insertEpisodes(3, 48, 400)).slice(0, 12); // 12 micro-batches: long enough to interrupt
    const step3 = { campaignId, stepId: 3, items, learner: { ...learner, micro_batch_tokens: 400 }, seed: 1 };
    const first = run(() => activities.trainStep(step3));
    const files = learnerFiles(stateDir, campaignId);
    type Health = { step: number; busy: number | null; progress: { micro_batch: number } };
    const health = () => learnerRequest<Health>(controlEndpoint(files)!, 'GET', '/health');
    const running = (h: Health) => h.busy === 3 && h.progress.micro_batch >= 2;
    while (!running(await health())) await new Promise((r) => setTimeout(r, 500));
    first.env.cancel('WORKER_SHUTDOWN');
    await assert.rejects(first.result, (err: unknown) => err instanceof CancelledFailure);
    const after = await health();
    assert.equal(after.busy, 3, 'the learner still runs step 3 after the worker left');
    const retry = run(() => activities.trainStep(step3));
    const result = await retry.result;
    assert.equal(result.stepId, 3);
    assert.equal((await health()).step, 3, 'step 3 applied once, by the learner run the first worker started');
  },
);

test(
  'a learner that stops making progress mid-step (a hung collective) is stopped and the attempt fails as infra',
  { timeout: 900_000 },
  async () => {
    const stuckId = `${campaignId}-stuck`;
    const stuck = createGpuActivities({ stateDir, controlUrl: controlUrlDb, stallLimitMs: 8000 });
    process.env.TBT_LEARNER_TEST_HOOKS = JSON.stringify({ micro_batch_sleep_s: 120 }); // one micro-batch hangs
    try {
      const items = await insertEpisodes(1, 4);
      const job = run(() => stuck.trainStep({ campaignId: stuckId, stepId: 1, items, learner, seed: 1 }));
      await assert.rejects(job.result, (err: Error) => {
        assert.match(err.message, /learner made no progress on step 1 for \d+ s \(update, micro-batch 1 of \d+\)/);
        return true;
      });
      const beats = job.heartbeats as { learner?: { step: number; micro_batch: number } }[];
      assert.ok(
        beats.some((b) => b.learner?.step === 1 && b.learner.micro_batch === 1),
        'heartbeats carry the learner progress',
      );
      const files = learnerFiles(stateDir, stuckId);
      const pid = readPid(files.pid);
      assert.ok(pid === undefined || !isAlive(pid), 'the stuck learner was stopped for the retry to restart it');
    } finally {
      delete process.env.TBT_LEARNER_TEST_HOOKS;
      await stopLearner(learnerFiles(stateDir, stuckId)).catch(() => undefined);
    }
  },
);

test(
  'collective weight sync: the learner pushes step 3 into the embedded vLLM, which then holds what the disk sync loads',
  { timeout: 1_200_000 },
  async () => {
    const exported = await run(() => activities.exportWeights({ campaignId, stepId: 3 })).result;
    const want = { campaignId, weightVersion: 0, basePath: 'embedded', deadlineMs: 600_000 };
    try {
      const server = await run(() => activities.ensurePolicyServer({ ...want, engine: 'vllm' })).result;
      const root = server.baseUrl.replace(/\/v1\/?$/, '');
      const token = fs.readFileSync(policyTokenFile(learnerFiles(stateDir, campaignId).dir), 'utf8').trim();
      const post = (route: string, body: unknown, bearer?: string) =>
        fetch(`${root}${route}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
          body: JSON.stringify(body),
        });
      // third review, finding 7: dev mode's control routes need the run's token, and collective_rpc runs only
      // what weight sync uses (before the guard: 200 from both, any worker method).
      const rpc = { method: 'get_model' };
      assert.equal((await post('/collective_rpc', rpc)).status, 401, 'collective_rpc without the token');
      assert.equal((await post('/reset_prefix_cache', {})).status, 401, 'reset_prefix_cache without the token');
      assert.equal((await post('/collective_rpc', rpc, token)).status, 403, 'a worker method weight sync never uses');
      const checksums = async () => {
        const response = await post('/weight_checker', { action: 'checksum' }, token);
        assert.equal(response.status, 200);
        return ((await response.json()) as { checksums: Record<string, string> }).checksums;
      };
      const base = await checksums();
      const step = { ...want, weightVersion: 3, servers: [server.baseUrl], weightsPath: exported.path };
      const pushed = await run(() => activities.syncWeights({ ...step, transport: 'collective' })).result;
      assert.equal(pushed.servers[0]!.transport, 'collective', 'the push was used, not the disk fallback');
      const afterPush = await checksums();
      const changed = Object.keys(base).filter((name) => base[name] !== afterPush[name]);
      assert.ok(changed.length > 0, 'the pushed weights differ from the base model');

      const loaded = await run(() => activities.syncWeights(step)).result;
      assert.equal(loaded.servers[0]!.transport, 'disk');
      assert.deepEqual(await checksums(), afterPush, 'the disk export loads the same weights as the push');
      console.log(`weight sync seconds: collective ${pushed.servers[0]!.seconds}, disk ${loaded.servers[0]!.seconds}`);
    } finally {
      await run(() => activities.stopLearner({ campaignId })).result;
    }
  },
);

test(
  'LoRA: the learner trains and exports an adapter only, which the embedded vLLM hot-loads under one model name',
  { timeout: 1_200_000 },
  async () => {
    const loraCampaign = `${campaignId}-lora`;
    const lora = { rank: 8, alpha: 16, targets: ['q_proj', 'v_proj'] };
    const loraLearner = learnerSchema.parse({ lr: 1e-2, micro_batch_tokens: 1024, lora });
    try {
      const started = await run(() =>
        activities.startLearner({ campaignId: loraCampaign, learner: loraLearner, seed: 1 }),
      ).result;
      assert.deepEqual(started.manifest.lora, lora);
      const items = await insertEpisodes(1, 4, 24, loraCampaign);
      const step = await run(() =>
        activities.trainStep({ campaignId: loraCampaign, stepId: 1, items, learner: loraLearner, seed: 1 }),
      ).result;
      assert.equal(step.metrics.mode, 'lora');
      const exported = await run(() => activities.exportWeights({ campaignId: loraCampaign, stepId: 1 })).result;
      assert.ok(fs.existsSync(path.join(exported.path, 'adapter_model.safetensors')));
      assert.ok(!fs.existsSync(path.join(exported.path, 'model.safetensors')), 'no full weights in a LoRA export');

      const want = { campaignId: loraCampaign, weightVersion: 0, basePath: 'embedded', deadlineMs: 600_000, lora };
      const server = await run(() => activities.ensurePolicyServer({ ...want, engine: 'vllm' })).result;
      assert.equal(server.model, 'policy-lora');
      const nextTokens = async (model: string) => {
        const response = await fetch(`${server.baseUrl}/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, prompt: 'The database row was', max_tokens: 1, temperature: 0, logprobs: 5 }),
        });
        assert.equal(response.status, 200, await response.clone().text());
        const body = (await response.json()) as { choices: { logprobs: { top_logprobs: Record<string, number>[] } }[] };
        return body.choices[0]!.logprobs.top_logprobs[0]!;
      };
      const baseModel = (await (await fetch(`${server.baseUrl}/models`)).json()) as { data: { id: string }[] };
      const baseName = baseModel.data.map((m) => m.id).find((id) => id !== 'policy-lora')!;
      const atZero = await nextTokens('policy-lora');
      assert.deepEqual(atZero, await nextTokens(baseName), 'the zero adapter it starts on is the base model');

      const synced = await run(() =>
        activities.syncWeights({ ...want, weightVersion: 1, servers: [server.baseUrl], weightsPath: exported.path }),
      ).result;
      assert.equal(synced.servers[0]!.transport, 'lora');
      const afterSync = await nextTokens('policy-lora');
      assert.notDeepEqual(afterSync, atZero, 'the trained adapter changed what the policy predicts');
      assert.deepEqual(await nextTokens(baseName), atZero, 'the base model itself is untouched');
      // Back to version 0 (an evaluation of the base policy on this server): the zero adapter, not the base weights.
      await run(() => activities.ensurePolicyServer({ ...want, engine: 'vllm' })).result;
      assert.deepEqual(await nextTokens('policy-lora'), atZero, 'version 0 is the zero adapter again');
      console.log(`weight sync seconds: lora adapter ${synced.servers[0]!.seconds}`);
    } finally {
      await run(() => activities.stopLearner({ campaignId: loraCampaign })).result;
    }
  },
);

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createGpuActivities } from '../activities/gpu-activities.ts';
import { learnerSchema } from '../config/campaign-config.ts';
import { databaseUrl, readEnvironment } from '../config/environment.ts';
import { withClient } from '../infra/control-database.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { learnerWeightPush } from '../learner-control/learner-weight-push.ts';
import { policySyncToken } from '../learner-control/policy-sync-token.ts';
import { syncPolicyWeights, weightLabel, type CollectivePush } from '../learner-control/policy-weight-sync.ts';
import { up } from '../cli/commands/infra.ts';
import { insertSyntheticEpisodes } from '../test/helpers/synthetic-episodes.ts';

/**
 * bench:weight-sync: seconds to bring the embedded vLLM to a new step's weights, on the embedded model, by each
 * transport in one run: `disk` (the learner's export folder, reloaded), `collective` (learner rank 0 broadcasts
 * the weights into vLLM's worker over gloo, docs/serving.md) and `lora` (a LoRA learner's adapter, hot-loaded,
 * docs/lora.md). Each sync is the whole paused window the rollouts wait for (pause, load, reset the prefix cache,
 * set the version, resume); the export the disk and LoRA syncs load is written once per step and not counted.
 *   npm run bench:weight-sync [-- REPS]   (default 3 per transport, alternated; the median is reported)
 */

const reps = Number(process.argv[2] ?? 3);
if (!(Number.isInteger(reps) && reps >= 1)) throw new Error(`REPS: expected an integer >= 1, got ${process.argv[2]}`);
const env = readEnvironment();
await up();
const controlUrl = databaseUrl(env);
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-bench-weight-sync-'));
const activities = createGpuActivities({ stateDir, controlUrl });
const run = <R>(fn: () => Promise<R>): Promise<R> => new MockActivityEnvironment().run(fn);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const folderBytes = (dir: string) => fs.readdirSync(dir).reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
const deadlineMs = 600_000;

/** A learner of `campaign` one step in, its export written, and the campaign's embedded vLLM on the base model. */
async function trainedCampaign(campaign: string, learner: ReturnType<typeof learnerSchema.parse>) {
  await run(() => activities.startLearner({ campaignId: campaign, learner, seed: 1 }));
  const items = await insertSyntheticEpisodes(controlUrl, campaign, 1, 4);
  await run(() => activities.trainStep({ campaignId: campaign, stepId: 1, items, learner, seed: 1 }));
  const exported = await run(() => activities.exportWeights({ campaignId: campaign, stepId: 1 }));
  const lora = learner.lora as { rank: number; alpha: number; targets: string[] } | undefined;
  const want = { campaignId: campaign, weightVersion: 0, basePath: 'embedded', deadlineMs, ...(lora ? { lora } : {}) };
  const server = await run(() => activities.ensurePolicyServer({ ...want, engine: 'vllm' }));
  const token = policySyncToken(learnerFiles(stateDir, campaign).dir, server.baseUrl);
  return { exported: exported.path, baseUrl: server.baseUrl, token };
}

const seconds: Record<'disk' | 'collective' | 'lora', number[]> = { disk: [], collective: [], lora: [] };
const pushes: Record<string, number>[] = [];
let version = 0;
const full = `bench-weight-sync-full-${process.pid}`;
const lora = `bench-weight-sync-lora-${process.pid}`;
try {
  console.log('full fine-tuning learner and vLLM ...');
  const a = await trainedCampaign(full, learnerSchema.parse({ lr: 1e-4, micro_batch_tokens: 1024 }));
  const learnerPush = await learnerWeightPush(stateDir, full, 1, 120);
  // The learner's own breakdown of each push (gather the shards, join the group, send).
  const recording: CollectivePush = {
    ...learnerPush,
    push: async (host, port, timeoutS, worldSize, secret) => {
      const answer = (await learnerPush.push(host, port, timeoutS, worldSize, secret)) as Record<string, number>;
      pushes.push(answer);
      return answer;
    },
  };
  for (let i = 0; i < reps; i++) {
    for (const transport of ['disk', 'collective'] as const) {
      const label = weightLabel(full, ++version);
      const push = transport === 'collective' ? recording : undefined;
      const r = await syncPolicyWeights(a.baseUrl, a.exported, label, deadlineMs, a.token, push);
      if (r.transport !== transport) throw new Error(`${transport} sync fell back to ${r.transport}: ${r.fallback}`);
      seconds[transport].push(r.seconds);
      console.log(`  ${transport.padEnd(10)} ${r.seconds.toFixed(3)} s`);
    }
  }
  const fullBytes = folderBytes(a.exported);
  await run(() => activities.stopLearner({ campaignId: full }));

  console.log('LoRA learner (rank 16, every linear layer) and vLLM in LoRA mode ...');
  const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
  const b = await trainedCampaign(
    lora,
    learnerSchema.parse({ lr: 1e-3, micro_batch_tokens: 1024, lora: { rank: 16, alpha: 32, targets } }),
  );
  for (let i = 0; i < reps; i++) {
    const r = await syncPolicyWeights(b.baseUrl, b.exported, weightLabel(lora, ++version), deadlineMs, b.token);
    if (r.transport !== 'lora') throw new Error(`the adapter sync ran as ${r.transport}`);
    seconds.lora.push(r.seconds);
    console.log(`  lora       ${r.seconds.toFixed(3)} s`);
  }
  const adapterBytes = folderBytes(b.exported);

  const [disk, collective, adapter] = [median(seconds.disk), median(seconds.collective), median(seconds.lora)];
  const parts = ['gather_s', 'join_s', 'send_s'].map((k) => `${k}=${median(pushes.map((p) => p[k]!)).toFixed(3)}`);
  console.log(`\ncollective push, learner side (median): ${parts.join(' ')} bytes=${pushes[0]?.bytes}`);
  console.log(
    `weight-sync: full_mb=${(fullBytes / 2 ** 20).toFixed(0)} adapter_mb=${(adapterBytes / 2 ** 20).toFixed(1)} ` +
      `disk_s=${disk.toFixed(3)} collective_s=${collective.toFixed(3)} lora_s=${adapter.toFixed(3)} ` +
      `collective_vs_disk=${(disk / collective).toFixed(2)}x lora_vs_disk=${(disk / adapter).toFixed(2)}x reps=${reps}`,
  );
} finally {
  for (const campaignId of [full, lora]) await run(() => activities.stopLearner({ campaignId })).catch(() => undefined);
  await withClient(controlUrl, (c) => c.query('DELETE FROM episodes WHERE campaign = ANY($1)', [[full, lora]]));
  fs.rmSync(stateDir, { recursive: true, force: true });
}

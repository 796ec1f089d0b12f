import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { campaignConfigSchema } from '../config/campaign-config.ts';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { createCampaignActivities, type StepRecord } from '../activities/campaign-activities.ts';
import { createEpisodeActivities } from '../activities/episode-activities.ts';
import { createGpuActivities } from '../activities/gpu-activities.ts';
import { learnerFiles, stopLearner } from '../learner-control/learner-process.ts';
import { reportedWeightLabel, weightLabel } from '../learner-control/policy-weight-sync.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { withClient } from '../infra/control-database.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';
import { campaignWorkflow, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import { controlReady, env, newPool, temporalClient, workflowBundle } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * A short campaign against a vLLM (CPU build) server started outside the campaign, as an operator would run
 * one (`base_url` is its URL, not `embedded`): the weights are synced into it after every step, every episode
 * of step n was sampled from version n-1, and the after-evaluation's server reports the final version.
 */

const stateDir = testTempDir('tbt-external-vllm-');
const prefix = `test-extvllm-${process.pid}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const campaignId = `extvllm-${process.pid}`;
let server: PolicyServerHandle;

before(async () => {
  await controlReady();
  server = await startPolicyServer({ engine: 'vllm', logFile: path.join(stateDir, 'vllm.log') });
});
after(async () => {
  await stopLearner(learnerFiles(stateDir, campaignId)).catch(() => undefined);
  await server?.stop();
});

test(
  'external vLLM server: weights synced every step, episodes record their version, eval at the final one',
  {
    timeout: 1_800_000,
  },
  async () => {
    const controlUrl = await controlReady();
    const steps = 2;
    const config = campaignConfigSchema.parse({
      name: 'external-vllm',
      suite: 'tasks/tiny',
      seed: 11,
      episode: {
        policy: { base_url: server.baseUrl, model: server.model, mode: 'tokens', timeout_ms: 120_000 },
        sampling: { temperature: 0.6, stop: ['</tool_call>'] },
        limits: { max_agent_turns: 2, max_tokens_per_turn: 48, episode_token_budget: 4096, wall_clock_ms: 240_000 },
        prompt: { tools_in_prompt: true, example: true },
      },
      probe: {
        repeats: 2,
        concurrency: 4,
        min_clean_runs: 2,
        retain_bands: ['too_hard', 'hard', 'medium', 'easy', 'too_easy'],
        max_candidates: 3,
      },
      training: {
        steps,
        groups_per_step: 1,
        group_size: 2,
        concurrency: 4,
        max_replacements: 1,
        zero_variance_fallback: 'keep_zero_variance',
      },
      learner: { lr: 1e-5, micro_batch_tokens: 2048 },
      evaluation: { repeats: 1, tasks: 'pool', concurrency: 4, before_training: false },
    });
    const pool = newPool({ warm: 1 });
    const connection = await NativeConnection.connect({ address: temporalAddress(env) });
    const workers = await Promise.all([
      Worker.create({
        connection,
        taskQueue: queues.orchestrator,
        workflowBundle: await workflowBundle(),
        activities: createCampaignActivities({ controlUrl, stateDir }),
      }),
      Worker.create({
        connection,
        taskQueue: queues.rollout,
        activities: createEpisodeActivities({ pool, grader: new TerminalStateGrader(pool, controlUrl), controlUrl }),
        maxConcurrentActivityTaskExecutions: 4,
      }),
      Worker.create({
        connection,
        taskQueue: queues.gpu('test'),
        activities: createGpuActivities({ stateDir, controlUrl }),
      }),
    ]);
    const { client, connection: clientConnection } = await temporalClient();
    try {
      const run = client.workflow.execute(campaignWorkflow, {
        workflowId: campaignId,
        taskQueue: queues.orchestrator,
        args: [
          {
            campaignId,
            config,
            suiteDir: path.join(repoRoot, 'tasks', 'tiny'),
            queues: { rollout: queues.rollout, gpu: queues.gpu('test') },
          },
        ],
      });
      const status = await Promise.all(workers.map((w) => w.runUntil(run))).then((r) => r[0] as CampaignStatus);
      assert.equal(status.stage, 'done');
      assert.equal(status.step, steps);

      const { rows } = await withClient(controlUrl, (c) =>
        c.query<{ record: StepRecord }>('SELECT record FROM campaign_steps WHERE campaign = $1 ORDER BY step', [
          campaignId,
        ]),
      );
      assert.deepEqual(
        rows.map((r) => [r.record.sampledWeightVersion, r.record.weightVersion, r.record.staleEpisodes]),
        [
          [0, 1, 0],
          [1, 2, 0],
        ],
        'step n samples from version n-1 and leaves every server at version n',
      );
      for (const { record } of rows) {
        assert.equal(record.syncSeconds.length, 1, 'one server synced');
        const ids = record.groups.flatMap((g) => g.episodeIds);
        const versions = await withClient(controlUrl, (c) =>
          c.query<{ v: number | null }>(
            `SELECT (record->>'weightVersion')::int AS v FROM episodes WHERE id = ANY($1)`,
            [ids],
          ),
        );
        assert.equal(versions.rows.length, ids.length);
        assert.ok(
          versions.rows.every((r) => r.v === record.step - 1),
          `every episode of step ${record.step} was sampled from version ${record.step - 1}`,
        );
      }
      const lines = fs
        .readFileSync(path.join(stateDir, 'campaigns', campaignId, 'steps.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { weight_version: number; sampler_kl: unknown; sampler_log_ratio_mean: unknown });
      assert.deepEqual(
        lines.map((l) => l.weight_version),
        [1, 2],
      );
      // A step that trained measured its mismatch with vLLM's log-probabilities; a skipped one (every advantage
      // zero, as zero-variance groups kept here can make it) ran no forward pass and has none.
      lines.forEach((l, i) => {
        if (rows[i]!.record.update.skipped === true) assert.equal(l.sampler_kl, null, `step ${i + 1} was skipped`);
        else {
          assert.ok(typeof l.sampler_kl === 'number' && l.sampler_kl >= 0, `sampler_kl: ${String(l.sampler_kl)}`);
          assert.ok(Number.isFinite(l.sampler_log_ratio_mean), `log-ratio: ${String(l.sampler_log_ratio_mean)}`);
        }
      });
      // The server itself reports the final version, and so did every after-evaluation episode.
      assert.equal(await reportedWeightLabel(server.baseUrl), weightLabel(campaignId, steps));
      const evalVersions = await withClient(controlUrl, (c) =>
        c.query<{ v: number | null }>(
          `SELECT (record->>'weightVersion')::int AS v FROM episodes WHERE campaign = $1 AND purpose = 'eval'`,
          [campaignId],
        ),
      );
      assert.ok(evalVersions.rows.length > 0);
      assert.ok(evalVersions.rows.every((r) => r.v === steps));
    } finally {
      await clientConnection.close();
      await connection.close();
      await pool.close();
    }
  },
);

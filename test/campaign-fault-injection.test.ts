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
import { readPid } from '../infra/daemon.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { withClient } from '../infra/control-database.ts';
import { startPolicyServer, writeRunToken, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';
import { smallModelDir } from '../infra/python-env.ts';
import { campaignWorkflow, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import { FaultInjectingProxy } from './helpers/fault-injecting-proxy.ts';
import { controlReady, env, newPool, temporalClient, workflowBundle } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * A whole campaign on the real stack (Temporal, Postgres, the real small model, the real torchrun learner)
 * with 20% of generation requests failing at the policy server: no infrastructure-errored episode may reach
 * an advantage, and the step still trains on the configured number of groups.
 */

const stateDir = testTempDir('tbt-campaign-');
const prefix = `test-fault-${process.pid}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const campaignId = `fault-${process.pid}`;
let server: PolicyServerHandle;
const proxy = { current: undefined as FaultInjectingProxy | undefined };

before(async () => {
  await controlReady();
  // The built-in server: these tests inject faults in front of it and need many fast restarts, not vLLM.
  // To the campaign it is an external server: its weight-sync token comes from TBT_POLICY_SYNC_TOKEN_FILE.
  const syncToken = writeRunToken(path.join(stateDir, 'policy-sync.token'));
  server = await startPolicyServer({
    engine: 'builtin',
    logFile: path.join(stateDir, 'policy-server.log'),
    reloadTokenFile: syncToken,
    weightsRoots: [stateDir, smallModelDir()],
  });
  process.env.TBT_POLICY_SYNC_TOKEN_FILE = syncToken;
});
after(async () => {
  delete process.env.TBT_POLICY_SYNC_TOKEN_FILE;
  await stopLearner(learnerFiles(stateDir, campaignId)).catch(() => undefined);
  await proxy.current?.stop();
  await server?.stop();
});

test(
  '20% injected infrastructure errors: zero leakage into advantages, full groups, coverage-gated evaluation',
  { timeout: 1_500_000 },
  async () => {
    const controlUrl = await controlReady();
    proxy.current = new FaultInjectingProxy(server.baseUrl.replace(/\/v1$/, ''), 5);
    const proxied = `${await proxy.current.start()}/v1`;
    const config = campaignConfigSchema.parse({
      name: 'fault-injection',
      suite: 'tasks/tiny',
      seed: 7,
      episode: {
        policy: { base_url: proxied, model: server.model, mode: 'tokens', timeout_ms: 120_000 },
        sampling: { temperature: 0.6, stop: ['</tool_call>'] },
        limits: { max_agent_turns: 2, max_tokens_per_turn: 48, episode_token_budget: 4096, wall_clock_ms: 240_000 },
        prompt: { tools_in_prompt: true, example: true },
      },
      probe: {
        repeats: 3,
        concurrency: 4,
        min_clean_runs: 3,
        retain_bands: ['too_hard', 'hard', 'medium', 'easy', 'too_easy'],
        max_candidates: 4,
      },
      training: {
        steps: 1,
        groups_per_step: 2,
        group_size: 2,
        concurrency: 4,
        infra_refill_cap: 4,
        max_replacements: 2,
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
    let runs: Promise<unknown>[] = [];
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
      runs = workers.map((w) => w.runUntil(run));
      const status = await Promise.all(runs).then((r) => r[0] as CampaignStatus);
      assert.equal(status.stage, 'done');
      assert.equal(status.step, 1);
      assert.ok(
        proxy.current.failed >= 3,
        `faults were injected (${proxy.current.failed} of ${proxy.current.requests})`,
      );

      const { rows } = await withClient(controlUrl, (c) =>
        c.query<{ record: StepRecord }>('SELECT record FROM campaign_steps WHERE campaign = $1', [campaignId]),
      );
      assert.equal(rows.length, 1, 'one recorded update per step');
      const step = rows[0]!.record;
      assert.equal(
        step.groups.length,
        config.training.groups_per_step,
        'the step trains on the configured number of groups',
      );
      assert.ok(
        step.groups.every((g) => g.episodeIds.length === config.training.group_size),
        'every group is full',
      );
      assert.equal(step.leakedInfraEpisodes, 0);
      // Independent leakage count: every trained episode is graded in the control database, none errored.
      const trained = step.groups.flatMap((g) => g.episodeIds);
      const statuses = await withClient(controlUrl, (c) =>
        c.query<{ status: string }>('SELECT status FROM episodes WHERE id = ANY($1)', [trained]),
      );
      assert.equal(statuses.rows.length, trained.length);
      assert.equal(statuses.rows.filter((r) => r.status === 'infrastructure_error').length, 0, 'leakage must be 0');
      const errored = await withClient(controlUrl, (c) =>
        c.query<{ n: string }>(
          `SELECT count(*) AS n FROM episodes WHERE campaign = $1 AND status = 'infrastructure_error'`,
          [campaignId],
        ),
      );
      assert.ok(Number(errored.rows[0]!.n) >= 1, 'some episodes of the campaign did fail as infrastructure errors');
      // The learner committed exactly that one step, and was released when the campaign ended.
      const files = learnerFiles(stateDir, campaignId);
      assert.deepEqual(
        fs.readdirSync(files.checkpoints).filter((f) => /^step-\d+$/.test(f)),
        ['step-1'],
      );
      assert.equal(readPid(files.pid), undefined, 'the learner process group is stopped at the end of the campaign');
      // The external server (through the proxy) was synced to the step's export, with the token from the file.
      const info = (await (await fetch(server.baseUrl.replace(/\/v1$/, '/weight_info'))).json()) as {
        weight_version: string | null;
      };
      assert.equal(info.weight_version, `${campaignId}@1`, 'the external server holds the weights of step 1');
      // The evaluation passed its coverage gate despite the faults, and the report exists.
      assert.ok(status.evalAfter && fs.existsSync(status.evalAfter.aggregate));
      assert.ok(status.report && fs.existsSync(status.report.html));
    } finally {
      // Workers still shutting down (the campaign failed) keep the connection: wait, so the real error shows.
      await Promise.allSettled(runs);
      await clientConnection.close();
      await connection.close();
      await pool.close();
    }
  },
);

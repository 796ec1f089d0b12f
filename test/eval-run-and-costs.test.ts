import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { NativeConnection, Worker } from '@temporalio/worker';
import { stringify } from 'yaml';
import { createCampaignActivities } from '../activities/campaign-activities.ts';
import { createEpisodeActivities } from '../activities/episode-activities.ts';
import { findTask } from '../rollout/task-lookup.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { runEvaluation } from '../cli/commands/campaign.ts';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { renderToolCall } from '../core/agent-prompt.ts';
import { withClient } from '../infra/control-database.ts';
import { OpenAIWireProtocolDouble } from './helpers/openai-wire-double.ts';
import { controlReady, env, newPool, workflowBundle } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * `tbt eval run` end to end on Temporal (orchestrator + rollout workers, real sandboxes and grading) with a
 * scripted policy behind the OpenAI wire protocol (a test double of an API model): keys uid#rep, automatic
 * re-runs of infrastructure errors, the coverage gate, the aggregate. And the campaign cost arithmetic.
 */

const dir = testTempDir('tbt-evalrun-');
const suiteDir = path.join(repoRoot, 'tasks', 'tiny');
const uids = ['tiny/todo/complete-2', 'tiny/todo/delete-3', 'tiny/parking/free-3'];
let controlUrl: string;

before(async () => {
  controlUrl = await controlReady();
});

test(
  'tbt eval run: every key once, an injected outage re-run, coverage gate passed, scores aggregated',
  { timeout: 300_000 },
  async () => {
    // The double answers each task with its golden call, then <DONE>; every 4th request fails with HTTP 500.
    let calls = 0;
    const policy = new OpenAIWireProtocolDouble((body) => {
      calls += 1;
      if (calls % 4 === 0) return { status: 500 };
      const query = body.messages.filter((m) => m.role === 'user').at(-1)!.content;
      const uid = uids.find((u) => findTask(suiteDir, u).task.query === query);
      if (!uid || body.messages.at(-1)!.role === 'tool') return 'Done. <DONE>';
      const golden = findTask(suiteDir, uid).task.golden[0]!;
      return renderToolCall(golden.tool, golden.arguments);
    });
    const policyUrl = await policy.start();
    const prefix = `test-evalrun-${process.pid}`;
    const configFile = path.join(dir, 'campaign.yaml');
    fs.writeFileSync(
      configFile,
      stringify({
        name: 'evalrun',
        suite: suiteDir,
        episode: {
          policy: { base_url: policyUrl, model: 'scripted-double', mode: 'chat' },
          limits: { max_agent_turns: 3, wall_clock_ms: 60_000 },
        },
        probe: { repeats: 1 },
        training: { steps: 1, groups_per_step: 1, group_size: 2 },
        evaluation: { repeats: 2, concurrency: 3 },
      }),
    );
    const tasksFile = path.join(dir, 'tasks.yaml');
    fs.writeFileSync(tasksFile, stringify(uids));
    const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
    const pool = newPool({ warm: 1 });
    const connection = await NativeConnection.connect({ address: temporalAddress(env) });
    const workers = await Promise.all([
      Worker.create({
        connection,
        taskQueue: queues.orchestrator,
        workflowBundle: await workflowBundle(),
        activities: createCampaignActivities({ controlUrl, stateDir: dir }),
      }),
      Worker.create({
        connection,
        taskQueue: queues.rollout,
        activities: createEpisodeActivities({ pool, grader: new TerminalStateGrader(pool, controlUrl), controlUrl }),
      }),
    ]);
    const previous = process.env.TBT_TASK_QUEUE_PREFIX;
    process.env.TBT_TASK_QUEUE_PREFIX = prefix;
    const campaignId = `evalrun-${process.pid}`;
    try {
      const evaluation = runEvaluation(['--config', configFile, '--campaign', campaignId, '--tasks', tasksFile]);
      const code = await Promise.all(workers.map((w) => w.runUntil(evaluation))).then((r) => r[0]);
      assert.equal(code, 0);
      const files = fs
        .readdirSync(path.join(dir, 'campaigns', campaignId))
        .filter((f) => /^eval-run-.*\.json$/.test(f));
      assert.equal(files.length, 1);
      const aggregate = JSON.parse(fs.readFileSync(path.join(dir, 'campaigns', campaignId, files[0]!), 'utf8')) as {
        tasks: { uid: string; n: number; c: number }[];
      };
      assert.deepEqual(
        aggregate.tasks.map((t) => [t.uid, t.n, t.c]).sort(),
        uids.map((u) => [u, 2, 2]).sort(),
        'every key exactly once, all passed',
      );
      const reruns = await withClient(controlUrl, (c) =>
        c.query<{ n: string }>(`SELECT count(*) AS n FROM episodes WHERE campaign = $1 AND id LIKE '%~retry-%'`, [
          campaignId,
        ]),
      );
      assert.ok(Number(reruns.rows[0]!.n) >= 1, 'infrastructure-errored keys were re-run under new ids');
    } finally {
      process.env.TBT_TASK_QUEUE_PREFIX = previous;
      await policy.stop();
      await connection.close();
      await pool.close();
    }
  },
);

test(
  'campaign costs: probing and training tokens x prices, plus learner process-seconds x the hourly ' + 'price',
  async () => {
    const campaignId = `costs-${process.pid}`;
    const usage = (input: number, output: number) => ({
      policy: { calls: 1, input, output, cached: 0 },
      user: { calls: 0, input: 0, output: 0, cached: 0 },
      judge: { calls: 0, input: 0, output: 0, cached: 0 },
    });
    await withClient(controlUrl, async (c) => {
      const insert = (id: string, purpose: string, input: number, output: number) =>
        c.query(
          `INSERT INTO episodes (id, task_uid, suite, scenario, domain, purpose, campaign, status, reward, record) ` +
            `VALUES ($1, 'u', 's', 'sc', 'd', $2, $3, 'success', 1, $4) ON CONFLICT (id) DO NOTHING`,
          [
            id,
            purpose,
            campaignId,
            JSON.stringify({ outcome: 'success', reward: 1, finishReason: 'done', usage: usage(input, output) }),
          ],
        );
      await insert(`${campaignId}/probe/a`, 'probe', 1_000_000, 500_000);
      await insert(`${campaignId}/step-1/a`, 'train', 2_000_000, 1_000_000);
      await c.query(`INSERT INTO campaign_steps (campaign, step, record) VALUES ($1, 1, $2) ON CONFLICT DO NOTHING`, [
        campaignId,
        JSON.stringify({ update: { time_s: 1800 } }),
      ]);
    });
    const prices = path.join(dir, 'prices.yaml');
    const role = { input_per_million: 1, output_per_million: 4, cached_input_per_million: 0.5 };
    fs.writeFileSync(prices, stringify({ policy: role, user: role, judge: role }));
    const activities = createCampaignActivities({ controlUrl, stateDir: dir });
    const file: string = await new MockActivityEnvironment().run(() =>
      activities.campaignCosts({ campaignId, prices, hourlyPriceUsd: 2, learnerProcesses: 4 }),
    );
    const costs = JSON.parse(fs.readFileSync(file, 'utf8')) as { probing: number; training: number };
    assert.equal(costs.probing, 1 * 1 + 0.5 * 4); // $3.00
    assert.equal(costs.training, 2 * 1 + 1 * 4 + 0.5 * 4 * 2); // $6 of tokens + 0.5 h x 4 processes x $2
  },
);

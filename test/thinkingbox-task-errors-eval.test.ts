import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { stringify } from 'yaml';
import { createCampaignActivities } from '../activities/campaign-activities.ts';
import { createEpisodeActivities } from '../activities/episode-activities.ts';
import { runEvaluation } from '../cli/commands/campaign.ts';
import { importThinkingbox } from '../cli/commands/tasks.ts';
import { repoRoot, taskQueues, temporalAddress } from '../config/environment.ts';
import { prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { loadImportedSuite, type ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { withClient } from '../infra/control-database.ts';
import { episodeHeartbeatMs } from '../rollout/episode-recording.ts';
import { thinkingboxResourcesFactory } from '../rollout/thinkingbox-resources.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble } from './helpers/openai-wire-double.ts';
import { controlReady, env, newPool, workflowBundle } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Task errors end to end: `tbt eval run` on Temporal (in-process orchestrator and rollout workers, the dataset's
 * real MCP servers and Python test code in its sandbox) of the ThinkingBox fixture plus one task whose own test
 * code is broken for some agents: `tool_call_names[-1]` raises IndexError when the agent made no tool call. The
 * policy (a double behind the OpenAI wire protocol) never calls a tool; it answers in text and ends with <DONE>.
 *
 * Why: before the `task_error` outcome such an episode was an infrastructure error, so the evaluation re-ran the
 * key under `~retry-` ids and then waited out "outages" for over an hour before its coverage gate failed. Now the
 * grader grades once more, the same exception at the same place twice makes the episode a task error, the key is
 * not re-run, and the aggregate lists the task under `task_errors` (cause naming the test file and line) while the
 * other tasks are scored. The evaluation must finish in minutes.
 */

const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const work = testTempDir('tbt-tb-task-errors-');
fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid: its files must be readable by others
const data = path.join(work, 'fixture');
const imported = path.join(work, 'imported');
const stateDir = path.join(work, 'state');
const raisingUid = 'task_errors.py:test_last_call_is_checkout';
const raisingFile = path.join(data, 'dataset', 'test_case', 'task_errors.py');
const RAISING_TEST = `from thinkingbox.common import Judge, TestContext

"""!
scenario: circulation_desk
"""


def test_last_call_is_checkout(x, judge):
    """!
    query: Hi, I'm member M02. Please check out The Left Hand of Darkness for me.
    user_context: You are Priya Raman, member id M02. You want to borrow "The Left Hand of Darkness" today.
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: checkout_book
              parameters: {member_id: M02, book_id: B001, due_date: "2025-04-01"}
    tags: [checkout, custom-check]
    """
    # Broken for an agent that made no tool call: the list is empty and [-1] raises IndexError.
    tool_call_names = [c.tool_call.name for c in x.tool_calls]
    assert tool_call_names[-1] == "checkout_book", tool_call_names
`;
/** The line of the raising expression, 1-based, as the cause must name it. */
const raisingLine = RAISING_TEST.split('\n').findIndex((l) => l.includes('tool_call_names[-1]')) + 1;
const REPEATS = 2;
const doubles: OpenAIWireProtocolDouble[] = [];
let suite: ThinkingBoxSuite;
let controlUrl: string;

before(() => {
  fs.cpSync(fixture, data, { recursive: true });
  fs.writeFileSync(raisingFile, RAISING_TEST);
  const list = path.join(data, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml');
  fs.appendFileSync(list, `- ${raisingUid}\n`);
  const errors: string[] = [];
  const io = { out: () => undefined, err: (s: string) => errors.push(s) };
  const code = importThinkingbox(['--data', path.join(data, 'dataset'), '--list', list, '--out', imported], io);
  assert.equal(code, 0, errors.join('\n'));
  suite = loadImportedSuite(imported).suite!;
  assert.ok(
    suite.tasks.some((t) => t.uid === raisingUid && !t.test.native),
    'the added task imports, its custom body graded in Python',
  );
  prepareDatasetEnvironment(suite.imported.server_packages, () => undefined);
});
after(async () => {
  await Promise.all(doubles.map((d) => d.stop()));
});

async function startDouble(reply: string): Promise<{ url: string; double: OpenAIWireProtocolDouble }> {
  const double = new OpenAIWireProtocolDouble(() => reply);
  doubles.push(double);
  return { url: await double.start(), double };
}

interface Aggregate {
  coverage: { tasks: number; attempts: number; task_error_tasks: number; task_error_keys: number };
  task_errors: { uid: string; keys: number; cause: string }[];
  tasks: { uid: string; n: number; c: number }[];
}

test(
  'tbt eval run: a task whose test code raises is a task error, not re-run; the rest is scored, in minutes',
  { timeout: 420_000 },
  async () => {
    controlUrl = await controlReady();
    // Text only, never a tool call; <DONE> ends each episode after one completion. The judge (one rubric task of
    // the fixture) says no.
    const policy = await startDouble('I am sorry, I cannot do that from here. <DONE>');
    const judge = await startDouble('No.');
    const campaignId = `tb-task-errors-${process.pid}`;
    const configFile = path.join(work, 'campaign.yaml');
    fs.writeFileSync(
      configFile,
      stringify({
        name: 'tb-task-errors',
        suite: imported,
        episode: {
          policy: { base_url: policy.url, model: 'text-only-double', mode: 'chat', timeout_ms: 15_000 },
          judge: { base_url: judge.url, model: 'judge-double', timeout_ms: 15_000 },
          limits: { max_agent_turns: 2, wall_clock_ms: 120_000 },
          thinkingbox: { warm_processes: 1, test_timeout_ms: 60_000 },
        },
        probe: { repeats: 1 },
        training: { steps: 1, groups_per_step: 1, group_size: 2 },
        evaluation: { repeats: REPEATS, concurrency: 4 },
      }),
    );
    const prefix = `test-tb-taskerr-${process.pid}`;
    const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
    const pool = newPool();
    const thinkingbox = thinkingboxResourcesFactory();
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
        activities: createEpisodeActivities({
          pool,
          grader: new TerminalStateGrader(pool, controlUrl),
          controlUrl,
          thinkingbox,
        }),
        maxHeartbeatThrottleInterval: episodeHeartbeatMs,
      }),
    ]);
    const previous = process.env.TBT_TASK_QUEUE_PREFIX;
    process.env.TBT_TASK_QUEUE_PREFIX = prefix;
    const printed: string[] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => {
      printed.push(args.map(String).join(' '));
      log(...args);
    };
    let wallMs = Infinity;
    try {
      const started = Date.now();
      const evaluation = runEvaluation(['--config', configFile, '--campaign', campaignId, '--tasks', 'all']);
      const code = await Promise.all(workers.map((w) => w.runUntil(evaluation))).then((r) => r[0]);
      wallMs = Date.now() - started;
      assert.equal(code, 0);
    } finally {
      console.log = log;
      process.env.TBT_TASK_QUEUE_PREFIX = previous;
      await connection.close();
      await thinkingbox.close();
      await pool.close();
    }
    console.log(`evaluation wall time: ${(wallMs / 1000).toFixed(1)} s`);
    assert.ok(wallMs < 5 * 60_000, `the evaluation took ${Math.round(wallMs / 1000)} s; it must not wait out outages`);
    assert.ok(
      policy.double.requests.length >= suite.tasks.length * REPEATS,
      'the policy answered every episode (in text)',
    );

    // The aggregate: the raising task listed apart, with the file and line of `tool_call_names[-1]`; the rest scored.
    const runDir = path.join(stateDir, 'campaigns', campaignId);
    const named = (re: RegExp) => fs.readdirSync(runDir).filter((f) => re.test(f));
    assert.equal(named(/^eval-run-.*\.json$/).length, 1);
    const aggregate = JSON.parse(fs.readFileSync(path.join(runDir, named(/^eval-run-.*\.json$/)[0]!), 'utf8'));
    const { task_errors: taskErrors, tasks, coverage } = aggregate as Aggregate;
    console.log(`task_errors: ${JSON.stringify(taskErrors, null, 2)}`);
    assert.equal(taskErrors.length, 1, JSON.stringify(taskErrors));
    const entry = taskErrors[0]!;
    assert.equal(entry.uid, raisingUid);
    assert.equal(entry.keys, REPEATS);
    assert.equal(
      entry.cause,
      `task error: the test of ${raisingUid} raised IndexError: list index out of range at ` +
        `${raisingFile}:${raisingLine} twice`,
    );
    const others = suite.tasks.map((t) => t.uid).filter((u) => u !== raisingUid);
    assert.deepEqual(
      tasks.map((t) => [t.uid, t.n]).sort(),
      others.map((u) => [u, REPEATS]).sort(),
      'every other task is scored, each key once',
    );
    assert.ok(
      tasks.some((t) => t.c > 0) && tasks.some((t) => t.c < t.n),
      'scores of both kinds: the no-change task passes, the others fail',
    );
    assert.deepEqual(
      [coverage.tasks, coverage.attempts, coverage.task_error_tasks, coverage.task_error_keys],
      [others.length, others.length * REPEATS, 1, REPEATS],
    );
    const summary = printed.join('\n');
    assert.match(summary, /task errors: 1 task \(2 keys\) left out of every score/);
    assert.ok(summary.includes(`  ${raisingUid} (2 keys): ${entry.cause}`), summary);

    // Every key graded (success or agent_failure) or a task error, as the result lines the aggregate read say.
    const lines = fs
      .readFileSync(path.join(runDir, named(/^eval-run-.*\.jsonl$/)[0]!), 'utf8')
      .trim()
      .split('\n')
      .map(
        (l) => JSON.parse(l) as { uid: string; success: boolean; infrastructure_error: boolean; task_error: boolean },
      );
    assert.equal(lines.length, suite.tasks.length * REPEATS);
    for (const l of lines) {
      assert.equal(l.infrastructure_error, false, `${l.uid}: not an infrastructure error`);
      assert.equal(l.task_error, l.uid === raisingUid, `${l.uid}: a task error iff it is the raising task`);
    }

    // The control database: the raising task's keys ran once each (no `~retry-` id), graded twice into a task error.
    const stored = await withClient(controlUrl, (c) =>
      c.query<{ id: string; status: string; task_error: { file: string; line: number; exception: string } | null }>(
        `SELECT id, status, record->'grade'->'taskError' AS task_error FROM episodes
           WHERE campaign = $1 AND task_uid = $2 ORDER BY id`,
        [campaignId, raisingUid],
      ),
    );
    assert.equal(stored.rows.length, REPEATS, stored.rows.map((r) => r.id).join('\n'));
    const withCalls = await withClient(controlUrl, (c) =>
      c.query<{ n: string }>(
        `SELECT count(*) AS n FROM episodes WHERE campaign = $1 AND jsonb_array_length(record->'toolCalls') > 0`,
        [campaignId],
      ),
    );
    assert.equal(Number(withCalls.rows[0]!.n), 0, 'no episode made a tool call: x.tool_calls was always empty');
    for (const row of stored.rows) {
      assert.doesNotMatch(row.id, /~retry-/, 'a task error is not re-run');
      assert.equal(row.status, 'task_error');
      assert.deepEqual(row.task_error, {
        file: raisingFile,
        line: raisingLine,
        exception: 'IndexError: list index out of range',
      });
    }
  },
);

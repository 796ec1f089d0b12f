import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection } from '@temporalio/worker';
import { createCampaignActivities } from '../activities/campaign-activities.ts';
import { thinkingboxResources, thinkingboxResourcesFactory } from '../rollout/thinkingbox-resources.ts';
import { importThinkingboxDataset } from '../datasets/thinkingbox/dataset-importer.ts';
import { loadImportedSuite, type ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { validateImportedTask } from '../datasets/thinkingbox/imported-task-validation.ts';
import { runTestCase } from '../datasets/thinkingbox/test-case-runner.ts';
import { gradeNatively } from '../datasets/thinkingbox/native-grading.ts';
import type { ServerEffects } from '../datasets/thinkingbox/reserved-tools.ts';
import { prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { judgeFrom } from '../rollout/judge-client.ts';
import type { TestContext } from '../datasets/thinkingbox/test-case-runner.ts';
import { importThinkingbox } from '../cli/commands/tasks.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { repoRoot, temporalAddress } from '../config/environment.ts';
import { withClient } from '../infra/control-database.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { IMPORTED_SUITE_FILE, type ImportedTask } from '../config/thinkingbox-schema.ts';
import { OpenAIWireProtocolDouble, type DoubleReply } from './helpers/openai-wire-double.ts';
import { episodeWorkers, runImportedEpisode } from './helpers/episode-workers.ts';
import { controlReady, env, newPool, temporalClient } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * ThinkingBox-format datasets end to end on our own fixture (examples/thinkingbox-fixture): import, parse
 * errors with file and line, the dataset's real MCP stdio servers per episode, golden validation, the judge on
 * a rubric task, a broken server as an infrastructure error, native and Python grading agreeing, and
 * evaluation-only uids kept out of a training pool.
 */

const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const fixtureData = path.join(fixture, 'dataset');
const fixtureList = path.join(fixture, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml');
const work = testTempDir('tbt-thinkingbox-');
fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid: its files must be readable by others
const imported = path.join(work, 'imported');
const resources = thinkingboxResources({
  warm_processes: 1,
  server_start: 'template',
  server_start_timeout_ms: 30_000,
  test_timeout_ms: 30_000,
  native_grading: true,
});
const doubles: OpenAIWireProtocolDouble[] = [];
let suite: ThinkingBoxSuite;
let datasetPy: string;

const capture = () => {
  const io = {
    lines: [] as string[],
    errors: [] as string[],
    out: (s: string) => io.lines.push(s),
    err: (s: string) => io.errors.push(s),
  };
  return io;
};

before(async () => {
  const io = capture();
  const exclude = path.join(work, 'benchmark.yaml');
  fs.writeFileSync(exclude, '- stacks_shelving.py:test_move_silent_spring\n');
  const code = importThinkingbox(
    ['--data', fixtureData, '--list', fixtureList, '--out', imported, '--exclude-uids', exclude],
    io,
  );
  assert.equal(code, 0, io.errors.join('\n'));
  suite = loadImportedSuite(imported).suite!;
  datasetPy = prepareDatasetEnvironment(suite.imported.server_packages, () => undefined).python;
});
after(async () => {
  await resources.servers.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

const emptyContext: TestContext = {
  effects: {},
  response: '',
  tool_calls: [],
  messages: [],
  init_result: {},
  session_id: 'test',
  metadata: {},
  tool_direct_responses: [],
};

const task = (uid: string) => {
  const t = suite.tasks.find((x) => x.uid === uid);
  assert.ok(t, `fixture task ${uid}`);
  return t;
};
const withNative = (pred: (t: ImportedTask) => boolean) => suite.tasks.find((t) => t.test.native && pred(t))!;

test('import keeps the original uids, merges init into world_state and marks --exclude-uids evaluation-only', () => {
  const listed = (fs.readFileSync(fixtureList, 'utf8').match(/^- .+$/gm) ?? []).map((l) => l.slice(2).trim());
  assert.deepEqual(
    suite.tasks.map((t) => t.uid),
    listed,
  );
  assert.ok(
    suite.tasks.some((t) => t.test.file.endsWith('test_case/stacks/stacks_shelving.py')),
    'stacks_shelving.py is found one folder down by its name prefix (the lookup rule)',
  );
  assert.deepEqual(
    suite.tasks.filter((t) => t.evaluation_only).map((t) => t.uid),
    ['stacks_shelving.py:test_move_silent_spring'],
  );
  const renew = task('circulation.py:test_renew_earthsea');
  assert.deepEqual(
    renew.history.map((m) => (m.T === 'Text' ? m.content : m.T)),
    ['Hello, is the desk open?', 'Yes, we are open. How can I help you today?'],
    'history greeting:0:2 from circulation.meta.yaml',
  );
  const desk = suite.scenarios.circulation_desk!;
  assert.equal(desk.agent, 'default');
  assert.deepEqual(
    desk.builtin_tools.map((b) => [b.name, b.is_end_turn]),
    [['ReportPolicyViolation', true]],
  );
  assert.match(desk.tools.find((x) => x.name === 'opening_hours')!.direct_response!, /open \{open\}-\{close\}/);
  assert.match(desk.tools.find((x) => x.name === 'checkout_book')!.arg_descriptions!.due_date!, /21 days/);
  assert.equal(suite.imported.servers.loans!.transport, 'stdio');
  assert.deepEqual(suite.imported.servers.loans, {
    transport: 'stdio',
    command: '{python}',
    args: ['-m', 'library_servers.loans_server'],
    env: { LIBRARY_TODAY: '2025-03-11' },
    cwd: path.join(fixture, 'servers'),
  });
  for (const t of suite.tasks) {
    const scenario = suite.scenarios[t.scenario]!;
    for (const [server, config] of Object.entries(scenario.world_state)) {
      // Lists concatenate: every row of the scenario's state is still there, in front of what init adds.
      const base = (config?.state ?? {}) as Record<string, unknown[]>;
      const merged = (t.world_state[server]?.state ?? {}) as Record<string, unknown[]>;
      for (const [table, rows] of Object.entries(base))
        assert.deepEqual(merged[table]!.slice(0, rows.length), rows, `${t.uid}: ${server}.${table}`);
    }
  }
  assert.ok(
    suite.tasks.some((t) => t.golden.length === 0),
    'a no-change task',
  );
  assert.ok(
    suite.tasks.some((t) => !t.test.native),
    'a task with a custom test body',
  );
  assert.ok(
    suite.tasks.some((t) => t.test.native?.rubrics),
    'a rubric task',
  );
});

test('files and tasks that cannot be parsed are reported with file and line; the rest still import', () => {
  const broken = path.join(work, 'broken-dataset');
  fs.cpSync(fixture, broken, { recursive: true });
  fs.writeFileSync(
    path.join(broken, 'dataset', 'test_case', 'syntax.py'),
    '"""!\nscenario: circulation_desk\n"""\n\ndef test_a(x):\n    """!\n    query: hi\n    """\n    assert (\n',
  );
  fs.writeFileSync(
    path.join(broken, 'dataset', 'test_case', 'yaml_errors.py'),
    [
      '"""!',
      'scenario: circulation_desk',
      '"""',
      '',
      'def test_bad_yaml(x):',
      '    """!',
      '    query: a: b',
      '    """',
      '',
      'def test_unknown_scenario(x):',
      '    """!',
      '    query: Hello',
      '    scenario: no_such_scenario',
      '    """',
      '',
      'def test_fine(x):',
      '    """!',
      '    query: Hello there',
      '    """',
      '    assert True',
      '',
    ].join('\n'),
  );
  const list = path.join(broken, 'list.yaml');
  fs.writeFileSync(
    list,
    `${fs.readFileSync(fixtureList, 'utf8')}- syntax.py:test_a\n- yaml_errors.py:test_bad_yaml\n- ` +
      `yaml_errors.py:test_unknown_scenario\n- yaml_errors.py:test_fine\n- missing.py:test_x\n`,
  );
  const result = importThinkingboxDataset({ dataDir: path.join(broken, 'dataset'), listFile: list });
  const at = (file: string) =>
    result.problems.filter((p) => p.file.endsWith(file)).map((p) => `${p.line}: ${p.message}`);
  assert.match(
    at('syntax.py').join('\n'),
    /^9: .*(syntax|never closed|was not closed)/im,
    'a Python syntax error names its line',
  );
  assert.match(at('yaml_errors.py').join('\n'), /^7: .*YAML/m, 'a YAML error inside a docstring names the .py line');
  assert.match(
    at('yaml_errors.py').join('\n'),
    /^13: task yaml_errors\.py:test_unknown_scenario: unknown scenario 'no_such_scenario'/m,
  );
  assert.match(at('list.yaml').join('\n'), /missing\.py:test_x: no such test file/);
  assert.equal(
    result.suite.tasks.length,
    suite.tasks.length + 1,
    'every good task still imports (the fixture tasks and test_fine)',
  );
  assert.ok(
    result.suite.tasks.some((t) => t.uid === 'yaml_errors.py:test_fine' && t.scenario === 'circulation_desk'),
    'module defaults apply',
  );
});

test(
  'golden validation: replaying the golden calls found in init passes; a null agent fails (or passes a no-change task)',
  { timeout: 300_000 },
  async () => {
    const picks = [
      withNative(
        (t) => t.golden.length > 0 && Object.keys(t.world_state).length > 1 && t.test.native!.servers.length > 1,
      ),
      withNative((t) => t.golden.length === 0),
      withNative((t) => !!t.test.native!.rubrics),
      suite.tasks.find((t) => !t.test.native)!,
    ];
    for (const t of picks) {
      const v = await validateImportedTask(resources, suite, t);
      assert.deepEqual(v.problems, [], t.uid);
      assert.equal(v.goldenPass, true, `${t.uid}: golden passes`);
      assert.equal(v.nullOk, true, `${t.uid}: null agent ${v.noChange ? 'passes (no change)' : 'fails'}`);
      assert.equal(v.noChange, t.golden.length === 0, `${t.uid}: no-change iff no golden calls`);
    }
  },
);

test('validating a custom-body task with no golden trajectory checks only that its test code runs', async () => {
  const t = suite.tasks.find((x) => x.uid.endsWith(':test_opening_hours'))!;
  assert.ok(!t.test.native && t.golden.length === 0, 'the fixture task is a custom body without golden calls');
  const v = await validateImportedTask(resources, suite, t);
  assert.deepEqual(v.problems, []);
  assert.equal(v.noGolden, true);
  assert.equal(v.goldenPass, false, 'no golden replay is claimed');
  assert.equal(v.nullOk, true, 'its test code ran on a null agent without a system error');
});

function startDouble(reply: (body: unknown, i: number) => DoubleReply): Promise<string> {
  const d = new OpenAIWireProtocolDouble(reply);
  doubles.push(d);
  return d.start();
}

const toolCall = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

async function episode(t: ImportedTask, script: string[], options: { judgeSays?: string; dir?: string } = {}) {
  const policyUrl = await startDouble((_b, i) => script[Math.min(i, script.length - 1)]!);
  const judgeUrl = options.judgeSays ? await startDouble(() => options.judgeSays!) : undefined;
  const config = episodeConfigSchema.parse({
    policy: { base_url: policyUrl, model: 'policy-double', timeout_ms: 10_000 },
    user: { mode: 'scripted' },
    limits: { max_agent_turns: 6, wall_clock_ms: 120_000 },
    ...(judgeUrl ? { judge: { base_url: judgeUrl, model: 'judge-double', timeout_ms: 10_000 } } : {}),
  });
  return runImportedEpisode(config, options.dir ?? imported, t, resources, `test:tb:${t.uid}`);
}

test(
  'an episode against the real tool servers: golden calls succeed, doing nothing fails, only visible tools are offered',
  { timeout: 120_000 },
  async () => {
    const t = withNative((x) => x.golden.length > 0 && !x.test.native!.rubrics);
    const good = await episode(t, [...t.golden.map((c) => toolCall(c.tool, c.arguments)), 'All done. <DONE>']);
    assert.equal(good.outcome, 'success', good.cause);
    assert.equal(good.toolCalls.length, t.golden.length);
    const names = good.tools!.map((x) => x.name);
    assert.ok(!names.includes('end_turn'), "no end_turn tool of ours beside the dataset's own end-turn tool");
    const offered = names.filter((n) => n !== 'ReportPolicyViolation').sort();
    // The reference's system messages, verbatim and apart (agent prompt, domain instructions), then our tools list.
    const system = good.messages.filter((m) => m.role === 'system').map((m) => m.content);
    const scenario = suite.scenarios[t.scenario]!;
    assert.deepEqual(system.slice(0, 2), [scenario.agent_prompt.trim(), scenario.bot_instructions.trim()]);
    assert.equal(system.length, 3);
    assert.match(system[2]!, /^# Tools/);
    assert.deepEqual(
      offered,
      suite.scenarios[t.scenario]!.tools.map((x) => x.name).sort(),
      "exactly the scenario's visible tools",
    );
    assert.ok(!offered.some((n) => n.startsWith('__reserved__')));

    const idle = await episode(t, ['I cannot help with that. <DONE>']);
    assert.equal(idle.outcome, 'agent_failure');
    assert.match(idle.cause ?? '', /differs from the golden state/);

    // move_book is served by the catalog server but not visible at the circulation desk.
    const desk = withNative((x) => x.scenario === 'circulation_desk' && 'catalog' in x.world_state);
    assert.ok(!suite.scenarios.circulation_desk!.tools.some((x) => x.name === 'move_book'));
    const sneaky = await episode(desk, [toolCall('move_book', { book_id: 'B001', shelf: 'Z9' }), 'Done. <DONE>']);
    assert.equal(sneaky.toolCalls[0]!.isError, true, 'a tool the scenario does not make visible cannot be called');
    assert.match(sneaky.toolCalls[0]!.result, /function 'move_book' does not exist/);
  },
);

test('a rubric task asks the judge: yes passes, no fails', { timeout: 120_000 }, async () => {
  const t = withNative((x) => !!x.test.native!.rubrics);
  const script = [
    ...t.golden.map((c) => toolCall(c.tool, c.arguments)),
    'Sorry, that loan cannot be renewed again. <DONE>',
  ];
  const yes = await episode(t, script, { judgeSays: 'yes' });
  assert.equal(yes.outcome, 'success', yes.cause);
  assert.ok(yes.grade!.rubrics.length >= 1, 'the judge was asked');
  assert.equal(yes.usage.judge.calls, yes.grade!.rubrics.length);
  const no = await episode(t, script, { judgeSays: 'No.' });
  assert.equal(no.outcome, 'agent_failure');
  assert.match(no.cause ?? '', /rubric answered no/);
});

test('a broken tool server is an infrastructure error, not a failure', { timeout: 120_000 }, async () => {
  const dir = path.join(work, 'broken-server');
  const data = JSON.parse(fs.readFileSync(path.join(imported, IMPORTED_SUITE_FILE), 'utf8'));
  data.servers.loans = {
    ...data.servers.loans,
    args: ['-c', 'import sys; sys.stderr.write("loans server: cannot open its database\\n"); sys.exit(3)'],
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, IMPORTED_SUITE_FILE), JSON.stringify(data));
  const t = withNative((x) => 'loans' in x.world_state && x.golden.length > 0);
  const record = await episode(t, [toolCall(t.golden[0]!.tool, t.golden[0]!.arguments), 'Done. <DONE>'], { dir });
  assert.equal(record.outcome, 'infrastructure_error');
  assert.match(record.cause ?? '', /tool server 'loans'.*did not start.*cannot open its database/s);
});

test(
  'native grading and the Python test body agree (pass, state mismatch, rubric yes and no)',
  { timeout: 180_000 },
  async () => {
    // A fixed-answer judge: the point is that both paths ask it the same questions and act on the answer alike.
    const judge = (answer: string) => judgeFrom(async () => ({ text: answer, usage: { input: 0, output: 0 } }));
    let compared = 0;
    for (const t of suite.tasks.filter((x) => x.test.native)) {
      for (const match of [true, false]) {
        for (const answer of t.test.native!.rubrics ? ['yes', 'no'] : ['yes']) {
          const effects: Record<string, ServerEffects> = {};
          for (const server of Object.keys(t.world_state)) {
            effects[server] = {
              result_db_hash: match ? 'h1' : 'h2',
              golden_db_hash: 'h1',
              diff: [],
              rubrics_yesno: t.test.native!.rubrics ? ['Did the assistant explain the renewal limit?'] : [],
            };
          }
          const native = await gradeNatively(t.test.native!, effects, 'an answer', judge(answer));
          const python = await runTestCase({
            file: t.test.file,
            function: t.test.function,
            context: { ...emptyContext, effects, response: 'an answer' },
            judge: judge(answer),
            timeoutMs: 30_000,
            python: datasetPy,
          });
          assert.equal(native.status, python.status, `${t.uid} match=${match} judge=${answer}`);
          assert.equal(native.verdicts.length, python.verdicts.length, `${t.uid}: same judge calls`);
          compared += 1;
        }
      }
    }
    assert.ok(compared >= 10, `${compared} comparisons`);
  },
);

test('evaluation-only uids never enter a training pool, even when the campaign lists no exclusions', async () => {
  const stateDir = testTempDir('tbt-tb-ingest-');
  const activities = createCampaignActivities({ controlUrl: await controlReady(), stateDir });
  const campaignId = `tb-ingest-${process.pid}`;
  const { uids, excluded, evaluationUids } = await activities.ingestCandidates({ campaignId, suiteDir: imported });
  assert.ok(
    !uids.includes('stacks_shelving.py:test_move_silent_spring'),
    'the evaluation-only task is not a candidate',
  );
  assert.ok(
    evaluationUids.includes('stacks_shelving.py:test_move_silent_spring'),
    'but it is evaluated (evaluation.tasks: all)',
  );
  assert.equal(excluded, 1);
  assert.equal(uids.length, suite.tasks.length - 1);
  // An exclusion file at ingestion removes more.
  const file = path.join(stateDir, 'more.yaml');
  fs.writeFileSync(file, `- ${JSON.stringify(uids[0])}\n`);
  const second = await activities.ingestCandidates({
    campaignId: `${campaignId}-b`,
    suiteDir: imported,
    excludeUidsFile: file,
  });
  assert.ok(!second.uids.includes(uids[0]!) && !second.uids.includes('stacks_shelving.py:test_move_silent_spring'));
  assert.equal(second.excluded, 2);
});

test(
  'test code has no network, and a test that hangs is killed as an infrastructure error',
  { timeout: 60_000 },
  async () => {
    const listening = await startDouble(() => 'yes');
    const file = path.join(work, 'hostile_tests.py');
    fs.writeFileSync(
      file,
      [
        'import time, urllib.request',
        '',
        'def test_phone_home(x, judge):',
        `    urllib.request.urlopen(${JSON.stringify(listening.replace(/\/v1$/, '/'))}, timeout=5).read()`,
        '',
        'def test_hangs(x, judge):',
        '    time.sleep(60)',
        '',
      ].join('\n'),
    );
    const context = emptyContext;
    await assert.rejects(
      runTestCase({ file, function: 'test_phone_home', context, timeoutMs: 20_000, python: datasetPy }),
      (err: Error) => {
        assert.equal(err.name, 'InfrastructureError');
        assert.match(err.message, /test .*test_phone_home raised an error/);
        return true;
      },
    );
    // Had it not been killed it would have passed after its sleep: the timeout, not the test, ended it.
    await assert.rejects(
      runTestCase({ file, function: 'test_hangs', context, timeoutMs: 2_000, python: datasetPy }),
      /did not finish within 2000 ms/,
    );
  },
);

test(
  'imported tasks run as Temporal episode activities on a rollout worker, stored under their original uids',
  { timeout: 180_000 },
  async () => {
    const picks = suite.tasks.filter((t) => t.test.native && !t.test.native.rubrics).slice(0, 3);
    // A scripted policy that plays each task's golden calls (found by the task's query), then says it is done.
    const policyUrl = await startDouble((body) => {
      const messages = (body as { messages: { role: string; content: string }[] }).messages;
      const at = messages.findIndex((m) => m.role === 'user' && picks.some((t) => t.query === m.content));
      const t = picks.find((x) => x.query === messages[at]!.content)!;
      const turn = messages.slice(at).filter((m) => m.role === 'assistant').length;
      return turn < t.golden.length ? toolCall(t.golden[turn]!.tool, t.golden[turn]!.arguments) : 'Done. <DONE>';
    });
    const config = episodeConfigSchema.parse({
      policy: { base_url: policyUrl, model: 'policy-double', timeout_ms: 15_000 },
      user: { mode: 'scripted' },
      limits: { max_agent_turns: 6, wall_clock_ms: 120_000 },
      thinkingbox: { warm_processes: 1 },
    });
    const controlUrl = await controlReady();
    const prefix = `test-tb-${process.pid}`;
    const pool = newPool();
    const connection = await NativeConnection.connect({ address: temporalAddress(env) });
    const { client, connection: clientConnection } = await temporalClient();
    const thinkingbox = thinkingboxResourcesFactory();
    const { queues, rollout, orchestrator } = await episodeWorkers(connection, prefix, {
      pool,
      controlUrl,
      thinkingbox,
    });
    try {
      const episodes = picks.map((t, i) => ({
        episodeId: `${prefix}/episode-${i}`,
        suiteDir: imported,
        taskUid: t.uid,
        purpose: 'adhoc' as const,
        config,
      }));
      const run = client.workflow.execute(episodeBatchWorkflow, {
        taskQueue: queues.orchestrator,
        workflowId: `${prefix}/batch`,
        args: [{ rolloutQueue: queues.rollout, episodes, concurrency: 2 }],
      });
      const summaries = await Promise.all([rollout.runUntil(run), orchestrator.runUntil(run)]).then((r) => r[0]);
      assert.deepEqual(
        summaries.map((s) => s.outcome),
        picks.map(() => 'success'),
        JSON.stringify(summaries),
      );
      const stored = await withClient(controlUrl, (c) =>
        c.query<{ task_uid: string; suite: string; status: string }>(
          `SELECT task_uid, suite, status FROM episodes WHERE id LIKE $1 ORDER BY id`,
          [`${prefix}/%`],
        ),
      );
      assert.deepEqual(
        stored.rows.map((r) => [r.task_uid, r.suite, r.status]),
        picks.map((t) => [t.uid, suite.name, 'success']),
      );
    } finally {
      await clientConnection.close();
      await connection.close();
      await pool.close();
      await thinkingbox.close();
    }
  },
);

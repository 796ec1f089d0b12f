import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { NativeConnection } from '@temporalio/worker';
import { thinkingboxResources, thinkingboxResourcesFactory } from '../rollout/thinkingbox-resources.ts';
import { prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { loadImportedSuite, type ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { validateImportedTask } from '../datasets/thinkingbox/imported-task-validation.ts';
import { importThinkingbox } from '../cli/commands/tasks.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { repoRoot, temporalAddress } from '../config/environment.ts';
import type { ImportedTask } from '../config/thinkingbox-schema.ts';
import { withClient } from '../infra/control-database.ts';
import { startPolicyServer } from '../infra/embedded-policy-server.ts';
import { startTypesense } from '../infra/typesense-standin.ts';
import { episodeBatchWorkflow } from '../workflows/episode-batch-workflow.ts';
import { OpenAIWireProtocolDouble, type DoubleReply } from './helpers/openai-wire-double.ts';
import { episodeWorkers, runImportedEpisode } from './helpers/episode-workers.ts';
import { controlReady, env, newPool, temporalClient } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * The real ThinkingBox-Bench on a small subset (one task per domain, a rubric task, the one read-only task):
 * the dataset read in place, its unmodified servers in the dataset's own Python environment, the Typesense
 * stand-in for their knowledge base, the bench's own test code. Golden replay passes and a null agent fails
 * every task but the read-only one; the rubric task's judge questions go through an OpenAI wire double.
 * The dataset is not part of this repository: without it the tests skip and say where they looked.
 */

const candidates = [
  process.env.TBT_THINKINGBOX_DATA,
  path.join(repoRoot, '..', 'shared', 'datasets', 'thinkingbox-data'),
  path.join(repoRoot, '..', '..', 'shared', 'datasets', 'thinkingbox-data'),
].filter((p): p is string => !!p);
const data = candidates.find((p) => fs.existsSync(path.join(p, 'dataset', 'test_case')));
const skip = data
  ? false
  : `the public ThinkingBox data is not here (looked in ${candidates.join(', ')}; set TBT_THINKINGBOX_DATA)`;

const SUBSET = [
  'sandbox_external_retail_group1.py:test_case_ST002_001',
  'sandbox_auto_insurance_group1.py:test_bil_001',
  'sandbox_consulting_group1.py:test_csa_001',
  'external_booking_v1_group1.py:test_bmd_001',
  'sandbox_neobank_support_v1_group1.py:test_dc_001',
  'external_booking_v1_group1_rubrics_yesno.py:test_bmd_004',
  'sandbox_neobank_support_v1_group1.py:test_he_017',
];
const READ_ONLY = 'sandbox_neobank_support_v1_group1.py:test_he_017';
const RUBRIC = 'external_booking_v1_group1_rubrics_yesno.py:test_bmd_004';

const work = testTempDir('tbt-bench-subset-');
const imported = path.join(work, 'imported');
const resources = thinkingboxResources({
  warm_processes: 0,
  server_start: 'template',
  server_start_timeout_ms: 120_000,
  test_timeout_ms: 60_000,
  native_grading: false,
});
const doubles: OpenAIWireProtocolDouble[] = [];
let suite: ThinkingBoxSuite;

before(async () => {
  if (skip) return;
  const list = path.join(work, 'subset.yaml');
  fs.writeFileSync(list, SUBSET.map((u) => `- ${u}\n`).join(''));
  const lines: string[] = [];
  const io = { out: (s: string) => lines.push(s), err: (s: string) => lines.push(s) };
  const code = importThinkingbox(['--data', path.join(data!, 'dataset'), '--list', list, '--out', imported], io);
  assert.equal(code, 0, lines.join('\n'));
  assert.match(lines.join('\n'), /imported 7 of 7 listed tasks \(5 scenarios/);
  suite = loadImportedSuite(imported).suite!;
  prepareDatasetEnvironment(suite.imported.server_packages, (l) => console.log(l), { allowSdist: ['sly'] });
  await startTypesense(env);
});
after(async () => {
  await resources.servers.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

const task = (uid: string) => suite.tasks.find((t) => t.uid === uid)!;

test('the bench subset imports with its real servers, agent and test files', { skip }, () => {
  assert.deepEqual(
    suite.tasks.map((t) => t.uid),
    SUBSET,
  );
  const retail = suite.scenarios.sandbox_external_retail!;
  assert.equal(retail.agent, 'think');
  assert.match(retail.agent_prompt, /<DONE>/);
  assert.deepEqual(
    retail.builtin_tools.map((b) => [b.name, b.is_end_turn]),
    [['InjectionAttackInToolResponse', true]],
  );
  assert.ok(retail.tools.some((t) => t.name === 'search_policy'));
  const spec = suite.imported.servers.sandbox_external_retail!;
  assert.ok(spec.transport === 'stdio' && spec.command === '{python}');
  assert.deepEqual(spec.env, { TYPESENSE_API_KEY: 'Fake' });
  for (const t of suite.tasks) assert.ok(t.golden.length >= 1 || t.uid === READ_ONLY, t.uid);
  assert.ok(task(RUBRIC).world_state.external_booking_v1!.rubrics_yesno, 'the rubric questions are in init');
});

test(
  'golden replay passes the bench test code; a null agent fails all but the read-only task',
  { skip, timeout: 1_200_000 },
  async () => {
    for (const t of suite.tasks) {
      const v = await validateImportedTask(resources, suite, t);
      assert.deepEqual(v.problems, [], t.uid);
      assert.equal(v.goldenPass, true, `${t.uid}: golden`);
      assert.equal(v.noChange, t.uid === READ_ONLY, `${t.uid}: no-change iff the read-only task`);
      assert.equal(v.nullOk, true, `${t.uid}: null agent ${v.noChange ? 'passes' : 'fails'}`);
    }
  },
);

function startDouble(reply: (body: unknown, i: number) => DoubleReply): Promise<string> {
  const d = new OpenAIWireProtocolDouble(reply);
  doubles.push(d);
  return d.start();
}

const toolCall = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

async function episode(t: ImportedTask, script: string[], judge: (body: unknown) => DoubleReply) {
  const policyUrl = await startDouble((_b, i) => script[Math.min(i, script.length - 1)]!);
  const judgeUrl = await startDouble(judge);
  const config = episodeConfigSchema.parse({
    policy: { base_url: policyUrl, model: 'policy-double', timeout_ms: 30_000 },
    user: { mode: 'scripted' },
    limits: { max_agent_turns: 40, wall_clock_ms: 600_000 },
    judge: { base_url: judgeUrl, model: 'judge-double', timeout_ms: 30_000 },
  });
  return runImportedEpisode(config, imported, t, resources, `test:bench:${t.uid}`);
}

test(
  "the rubric task's yes/no questions reach the judge over the wire with the reference prompt",
  { skip, timeout: 600_000 },
  async () => {
    const t = task(RUBRIC);
    const questions = (t.world_state.external_booking_v1!.rubrics_yesno as string[]) ?? [];
    const script = [
      ...t.golden.map((c) => toolCall(c.tool, c.arguments)),
      'Your board type is now full board; transaction TX-1. <DONE>',
    ];
    const asked: string[] = [];
    const yes = await episode(t, script, (body) => {
      const messages = (body as { messages: { role: string; content: string }[] }).messages;
      assert.match(messages[0]!.content, /^You are a judge, your task is to read the contents of a message/);
      asked.push(messages[1]!.content);
      return 'Yes';
    });
    assert.equal(yes.outcome, 'success', yes.cause);
    assert.equal(asked.length, questions.length, 'one judge call per rubric question');
    assert.ok(asked[0]!.startsWith('<message>\nYour board type is now full board; transaction TX-1.'), asked[0]);
    assert.ok(asked[0]!.endsWith(questions[0]!));
    const no = await episode(t, script, () => 'No.');
    assert.equal(no.outcome, 'agent_failure');
    assert.match(no.cause ?? '', /Rubric yesno failed/);
  },
);

test(
  'bad input in the real format names file, line and field; one bad task never blocks the other 507',
  { skip, timeout: 300_000 },
  () => {
    // A copy of the dataset (links leading out of a dataset are refused), plus one broken test file and a broken
    // servers.yaml.
    const dir = path.join(work, 'broken');
    fs.mkdirSync(path.join(dir, 'servers'), { recursive: true });
    fs.cpSync(path.join(data!, 'dataset'), path.join(dir, 'dataset'), { recursive: true });
    fs.writeFileSync(
      path.join(dir, 'dataset', 'test_case', 'broken_tasks.py'),
      [
        'from thinkingbox.common import Judge, TestContext',
        '',
        'def test_bad_field(x: TestContext, judge: Judge):',
        '    """!',
        '    scenario: sandbox_consulting',
        '    query: hello',
        '    max_user_sim_turns: many',
        '    """',
        '',
      ].join('\n'),
    );
    const servers = fs.readFileSync(path.join(data!, 'servers', 'servers.yaml'), 'utf8');
    fs.writeFileSync(
      path.join(dir, 'servers', 'servers.yaml'),
      servers.replace('  online_banking:\n    type: mcp-process', '  online_banking:\n    type: mcp-proces'),
    );
    const bench = path.join(data!, 'releases', 'thinkingbox_bench_v1', 'testlist_thinkingbox_bench_v1.yaml');
    const list = path.join(dir, 'list.yaml');
    fs.writeFileSync(list, `${fs.readFileSync(bench, 'utf8')}- broken_tasks.py:test_bad_field\n`);
    const lines: string[] = [];
    const code = importThinkingbox(
      ['--data', path.join(dir, 'dataset'), '--list', list, '--out', path.join(dir, 'out')],
      {
        out: (s) => lines.push(s),
        err: (s) => lines.push(s),
      },
    );
    const text = lines.join('\n');
    assert.equal(code, 1);
    assert.match(text, /imported 507 of 508 listed tasks \(5 scenarios/);
    assert.match(text, /broken_tasks\.py:7: max_user_sim_turns: .*task broken_tasks\.py:test_bad_field/);
    const serversLine = servers.split('\n').findIndex((l) => l === '  online_banking:') + 2;
    assert.match(text, new RegExp(`servers\\.yaml:${serversLine}: servers\\.online_banking\\.type: `));
  },
);

test(
  'a bench episode through Temporal with the embedded model: its prompt overflows the context, a graded failure',
  { skip, timeout: 900_000 },
  async () => {
    // The built-in engine starts in seconds; vLLM refuses an over-long prompt with the same text
    // (test/episode-loop.test.ts) and serves the tiny suite in test/episode-real-model.test.ts.
    const server = await startPolicyServer({
      engine: 'builtin',
      logFile: path.join(work, 'policy-server.log'),
    });
    const controlUrl = await controlReady();
    const prefix = `test-bench-${process.pid}`;
    const pool = newPool();
    const thinkingbox = thinkingboxResourcesFactory();
    const connection = await NativeConnection.connect({ address: temporalAddress(env) });
    const { client, connection: clientConnection } = await temporalClient();
    try {
      const { queues, rollout, orchestrator } = await episodeWorkers(connection, prefix, {
        pool,
        controlUrl,
        thinkingbox,
      });
      const config = episodeConfigSchema.parse({
        policy: { base_url: server.baseUrl, model: server.model, timeout_ms: 120_000 },
        user: { mode: 'scripted' },
        limits: { max_agent_turns: 4, wall_clock_ms: 600_000 },
      });
      const uid = SUBSET[0]!;
      const run = client.workflow.execute(episodeBatchWorkflow, {
        taskQueue: queues.orchestrator,
        workflowId: `${prefix}/batch`,
        args: [
          {
            rolloutQueue: queues.rollout,
            episodes: [{ episodeId: `${prefix}/episode`, suiteDir: imported, taskUid: uid, purpose: 'adhoc', config }],
            concurrency: 1,
          },
        ],
      });
      const [summaries] = await Promise.all([rollout.runUntil(run), orchestrator.runUntil(run)]);
      assert.deepEqual(
        summaries.map((s) => s.outcome),
        ['agent_failure'],
        JSON.stringify(summaries),
      );
      const stored = await withClient(controlUrl, (c) =>
        c.query<{ status: string; finish_reason: string; refusal: string | null }>(
          `SELECT status, finish_reason, record->>'contextOverflow' AS refusal FROM episodes WHERE id = $1`,
          [`${prefix}/episode`],
        ),
      );
      assert.equal(stored.rows[0]?.status, 'agent_failure');
      assert.equal(stored.rows[0]?.finish_reason, 'context_overflow');
      assert.match(stored.rows[0]?.refusal ?? '', /maximum context length is 8192 tokens/);
    } finally {
      await clientConnection.close();
      await connection.close();
      await pool.close();
      await thinkingbox.close();
      await server.stop();
    }
  },
);

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { scenarioSchema, taskSchema } from '../config/task-schema.ts';
import { createJudge } from '../rollout/judge-client.ts';
import { openToolSession } from '../rollout/mcp-tool-session.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { replayCalls, TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble } from './helpers/openai-wire-double.ts';
import { controlReady, newPool } from './helpers/stack.ts';

const scenario = scenarioSchema.parse({
  name: 'grading_shop',
  instructions: 'Refunds need approval.',
  schema: `CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL,
                                updated_at timestamptz NOT NULL DEFAULT now());
           CREATE TABLE approvals (order_id integer PRIMARY KEY REFERENCES orders(id));`,
  seed: "INSERT INTO orders (id, status) VALUES (1, 'delivered'), (2, 'delivered');",
  volatile: { orders: ['updated_at'] },
  tools: [
    {
      name: 'approve',
      description: 'Record an approval.',
      input_schema: { type: 'object', properties: { order_id: { type: 'integer' } }, required: ['order_id'] },
      sql: 'INSERT INTO approvals VALUES (:order_id)',
      result: 'affected',
    },
    {
      name: 'refund',
      description: 'Refund an order.',
      input_schema: { type: 'object', properties: { order_id: { type: 'integer' } }, required: ['order_id'] },
      sql: "UPDATE orders SET status = 'refunded', updated_at = now() WHERE id = :order_id RETURNING id, status",
      result: 'row',
      empty_error: 'no such order',
    },
  ],
});
const task = taskSchema.parse({
  uid: 'grading/refund-1',
  scenario: 'grading_shop',
  query: 'Refund order 1.',
  golden: [
    { tool: 'approve', arguments: { order_id: 1 } },
    { tool: 'refund', arguments: { order_id: 1 } },
  ],
  assertions: [{ name: 'order 2 untouched', sql: "SELECT status = 'delivered' FROM orders WHERE id = 2" }],
  rubrics: ['Does the assistant confirm the refund?'],
});

let pool: SandboxPool;
let grader: TerminalStateGrader;
const judgeDouble = new OpenAIWireProtocolDouble((body) => {
  const text = body.messages.at(-1)!.content;
  if (text.includes('OUTAGE')) return { status: 503 };
  return text.includes('refunded') ? 'Yes.' : 'No, it does not.';
});
let judgeUrl: string;

before(async () => {
  const controlUrl = await controlReady();
  pool = newPool();
  grader = new TerminalStateGrader(pool, controlUrl);
  judgeUrl = await judgeDouble.start();
});
after(async () => {
  await pool.close();
  await judgeDouble.stop();
});

async function gradeAfter(calls: { tool: string; arguments: Record<string, unknown> }[], lastAssistantText: string) {
  const sandbox = await pool.acquire(scenario, 'test:grading');
  try {
    const session = await openToolSession(scenario, sandbox);
    for (const c of calls) await session.callTool(c.tool, c.arguments);
    await session.close();
    return await grader.grade({
      scenario,
      task,
      sandbox,
      lastAssistantText,
      judge: createJudge({ baseUrl: judgeUrl, model: 'judge-double' }),
    });
  } finally {
    await pool.release(sandbox);
  }
}

test(
  'the golden path passes: same state (volatile timestamps ignored), assertions hold, the judge says yes at ' +
    'temperature 0',
  async () => {
    const report = await gradeAfter(task.golden, 'Your order 1 has been refunded.');
    assert.equal(report.outcome, 'success', report.cause);
    assert.equal(report.reward, 1);
    assert.equal(report.resultHash, report.goldenHash);
    assert.deepEqual(report.assertions, [{ name: 'order 2 untouched', passed: true }]);
    assert.equal(report.rubrics[0]?.yes, true);
    assert.equal(judgeDouble.requests.at(-1)?.temperature, 0);
  },
);

test('a missing side effect fails with a readable diff', async () => {
  const report = await gradeAfter([{ tool: 'refund', arguments: { order_id: 1 } }], 'Your order 1 has been refunded.');
  assert.equal(report.outcome, 'agent_failure');
  assert.equal(report.reward, 0);
  assert.deepEqual(report.diff, [{ path: 'approvals[order_id=1]', result: null, golden: { order_id: 1 } }]);
});

test('an extra side effect fails both the state check and the assertion', async () => {
  const report = await gradeAfter([...task.golden, { tool: 'refund', arguments: { order_id: 2 } }], 'refunded');
  assert.equal(report.outcome, 'agent_failure');
  assert.deepEqual(
    report.diff.map((d) => d.path),
    ['orders[id=2].status'],
  );
  assert.deepEqual(report.assertions, [{ name: 'order 2 untouched', passed: false }]);
});

test('a rubric answered no fails an otherwise right state', async () => {
  const report = await gradeAfter(task.golden, 'Done.');
  assert.equal(report.stateMatches, true);
  assert.equal(report.outcome, 'agent_failure');
  assert.match(report.cause!, /rubric answered no/);
});

test('a judge outage is an infrastructure error, never a 0', async () => {
  const report = await gradeAfter(task.golden, 'OUTAGE');
  assert.equal(report.outcome, 'infrastructure_error');
  assert.match(report.cause!, /judge unavailable/);
});

test('a golden call that fails is reported as a task defect naming the task and call', async () => {
  const broken = taskSchema.parse({
    ...task,
    uid: 'grading/broken',
    golden: [{ tool: 'refund', arguments: { order_id: 99 } }],
  });
  const sandbox = await pool.acquire(scenario, 'test:broken');
  try {
    await assert.rejects(
      replayCalls(scenario, sandbox, broken),
      /task grading\/broken: golden\[0\] refund failed: Error: no such order/,
    );
  } finally {
    await pool.release(sandbox);
  }
});

test('tool errors come back as results the agent can read; unknown tools and bad arguments too', async () => {
  const sandbox = await pool.acquire(scenario, 'test:tool-errors');
  const session = await openToolSession(scenario, sandbox);
  try {
    assert.deepEqual(
      (await session.listTools()).map((t) => t.name),
      ['approve', 'refund'],
    );
    const unknown = await session.callTool('delete_all', {});
    assert.equal(unknown.isError, true);
    assert.match(unknown.text, /unknown tool 'delete_all'/);
    const missing = await session.callTool('refund', {});
    assert.match(missing.text, /must have required property 'order_id'/);
    const duplicate = await session.callTool('approve', { order_id: 1 });
    assert.equal(duplicate.isError, false);
    const again = await session.callTool('approve', { order_id: 1 });
    assert.equal(again.isError, true);
    assert.match(again.text, /duplicate key value/);
  } finally {
    await session.close();
    await pool.release(sandbox);
  }
});

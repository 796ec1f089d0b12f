import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { scenarioSchema, taskSchema, type Task } from '../config/task-schema.ts';
import { episodeDependencies, episodeRunOptions } from '../rollout/episode-setup.ts';
import { sandboxEnvironment } from '../rollout/episode-environment.ts';
import { playEpisode } from '../rollout/episode-runner.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble, type DoubleReply } from './helpers/openai-wire-double.ts';
import { controlReady, newPool } from './helpers/stack.ts';

/** Loop logic against a scripted policy (an OpenAI wire-protocol test double) and the real sandbox + MCP stack. */

const scenario = scenarioSchema.parse({
  name: 'loop_shop',
  instructions: 'Approve orders when asked.',
  schema: 'CREATE TABLE orders (id integer PRIMARY KEY, approved boolean NOT NULL DEFAULT false);',
  seed: 'INSERT INTO orders (id) VALUES (1), (2);',
  tools: [
    {
      name: 'approve',
      description: 'Approve an order.',
      input_schema: { type: 'object', properties: { order_id: { type: 'integer' } }, required: ['order_id'] },
      sql: 'UPDATE orders SET approved = true WHERE id = :order_id AND NOT approved RETURNING id',
      result: 'row',
      empty_error: 'order not found or already approved',
    },
  ],
});
const task = taskSchema.parse({
  uid: 'loop/approve-1',
  scenario: 'loop_shop',
  query: 'Approve order 1.',
  golden: [{ tool: 'approve', arguments: { order_id: 1 } }],
});
const chatty = taskSchema.parse({
  ...task,
  uid: 'loop/chatty',
  user_context: 'You want order 1 approved.',
  user_replies: ['please go on', 'still waiting', 'hello?', 'anyone?'],
  limits: { max_user_turns: 2 },
});

const call = (name: string, args: unknown) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

let pool: SandboxPool;
let grader: TerminalStateGrader;
const doubles: OpenAIWireProtocolDouble[] = [];
before(async () => {
  const controlUrl = await controlReady();
  pool = newPool({ warm: 1 });
  grader = new TerminalStateGrader(pool, controlUrl);
});
after(async () => {
  await pool.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

async function episode(t: Task, script: DoubleReply[], limits: Record<string, number> = {}, user?: DoubleReply) {
  const policy = new OpenAIWireProtocolDouble((_b, i) => script[Math.min(i, script.length - 1)]!);
  doubles.push(policy);
  const policyUrl = await policy.start();
  let userConfig: unknown = { mode: 'scripted' };
  let userDouble: OpenAIWireProtocolDouble | undefined;
  if (user !== undefined) {
    userDouble = new OpenAIWireProtocolDouble(() => user);
    doubles.push(userDouble);
    userConfig = {
      mode: 'llm',
      endpoint: { base_url: await userDouble.start(), model: 'user-double', timeout_ms: 5000 },
    };
  }
  const config = episodeConfigSchema.parse({
    policy: { base_url: policyUrl, model: 'policy-double', timeout_ms: 10_000 },
    user: userConfig,
    limits: { max_agent_turns: 6, ...limits },
  });
  const record = await playEpisode(
    episodeDependencies(config, sandboxEnvironment(pool, grader, scenario, t), t),
    t,
    'test:loop',
    episodeRunOptions(config),
  );
  return { record, policy, userDouble };
}

test('a right tool call then <DONE> ends the episode and succeeds', async () => {
  const { record } = await episode(task, [call('approve', { order_id: 1 }), 'Order 1 is approved. <DONE>']);
  assert.equal(record.finishReason, 'done');
  assert.equal(record.outcome, 'success');
  assert.equal(record.reward, 1);
  assert.deepEqual(
    record.toolCalls.map((c) => [c.name, c.arguments, c.isError]),
    [['approve', { order_id: 1 }, false]],
  );
});

test('the end-turn tool ends the episode; a wrong action is graded as an agent failure with a diff', async () => {
  const { record } = await episode(task, [call('approve', { order_id: 2 }), call('end_turn', {})]);
  assert.equal(record.finishReason, 'end_turn');
  assert.equal(record.outcome, 'agent_failure');
  assert.deepEqual(record.grade!.diff.map((d) => d.path).sort(), ['orders[id=1].approved', 'orders[id=2].approved']);
  // Among a completion's calls, the end-turn tool runs none of them (the reference's rule).
  const together = await episode(task, [`${call('approve', { order_id: 2 })}\n${call('end_turn', {})}`]);
  assert.equal(together.record.finishReason, 'end_turn');
  assert.deepEqual(
    together.record.toolCalls.map((c) => [c.name, c.result]),
    [['end_turn', '']],
  );
  assert.deepEqual(
    together.record.grade!.diff.map((d) => d.path),
    ['orders[id=1].approved'],
  );
});

test('a task without user context ends after the first message without tool calls', async () => {
  const { record, policy } = await episode(task, [call('approve', { order_id: 1 }), 'Approved.']);
  assert.equal(record.finishReason, 'single_turn');
  assert.equal(record.outcome, 'success');
  assert.equal(policy.requests.length, 2);
});

test('tool errors, malformed arguments and unknown tools come back to the agent as tool results', async () => {
  const { record, policy } = await episode(task, [
    call('approve', { order_id: 9 }),
    '<tool_call>\n{"name": "approve", "arguments": {"order_id": 1</tool_call>',
    call('cancel_everything', {}),
    call('approve', { order_id: 'one' }),
    call('approve', { order_id: 1 }),
    'Done. <DONE>',
  ]);
  assert.equal(record.outcome, 'success');
  const toolMessages = (i: number) =>
    policy.requests[i]!.messages.filter((m) => m.role === 'tool').map((m) => m.content);
  assert.match(toolMessages(1).at(-1)!, /Error: order not found or already approved/);
  assert.match(toolMessages(2).at(-1)!, /Error: could not parse the tool call/);
  assert.match(toolMessages(3).at(-1)!, /Error: unknown tool 'cancel_everything'/);
  assert.match(toolMessages(4).at(-1)!, /invalid arguments for approve: \/order_id must be integer/);
  assert.deepEqual(
    record.toolCalls.map((c) => c.isError),
    [true, true, true, true, false],
  );
});

test('the agent-turn limit ends the episode and its terminal state is graded (the reference rule)', async () => {
  const { record } = await episode(task, [call('approve', { order_id: 1 })], { max_agent_turns: 3 });
  assert.equal(record.finishReason, 'agent_turn_limit');
  assert.ok(record.grade, 'graded');
  assert.equal(record.outcome, record.grade.outcome);
  assert.equal(record.completions.length, 3);
  // Unlimited by default: the agent keeps its turns until it stops by itself.
  const unlimited = await episode(
    task,
    [call('approve', { order_id: 1 }), call('approve', { order_id: 1 }), 'Done. <DONE>'],
    {},
  );
  assert.equal(unlimited.record.finishReason, 'done');
});

test('the user-turn limit ends a conversation, which is then graded', async () => {
  const { record } = await episode(chatty, [call('approve', { order_id: 1 }), 'Anything else?'], {});
  assert.equal(record.finishReason, 'user_turn_limit');
  assert.equal(record.usage.user.calls, 0, 'scripted user makes no model calls');
  assert.deepEqual(
    record.messages.filter((m) => m.role === 'user').map((m) => m.content),
    ['Approve order 1.', 'please go on', 'still waiting'],
  );
  assert.equal(record.outcome, 'success');
});

test('a completion cut at the per-turn cap is interpreted and the episode goes on (the reference rule)', async () => {
  // A finished tool call before the cut runs; the agent then carries on.
  const cut = await episode(
    task,
    [`${call('approve', { order_id: 1 })}\nNow let me also explain at great length`, 'Order 1 is approved. <DONE>'],
    { max_tokens_per_turn: 8 },
  );
  assert.equal(cut.record.finishReason, 'done');
  assert.equal(cut.policy.requests[0]!.max_tokens, 8);
  assert.equal(cut.record.completions[0]!.finishReason, 'length');
  assert.deepEqual(
    cut.record.toolCalls.map((c) => [c.name, c.arguments, c.isError]),
    [['approve', { order_id: 1 }, false]],
  );
  assert.equal(cut.record.outcome, 'success');
  // Cut inside its reasoning, the completion shows the user nothing: the agent is asked again, the user is not.
  const thinking = await episode(chatty, [
    { content: '<think>I will think about this for a very long', finishReason: 'length', completionTokens: 50 },
    call('approve', { order_id: 1 }),
    'Done. <DONE>',
  ]);
  assert.equal(thinking.record.finishReason, 'done');
  assert.equal(thinking.policy.requests.length, 3);
  assert.deepEqual(
    thinking.record.messages.filter((m) => m.role === 'user').map((m) => m.content),
    ['Approve order 1.'],
  );
  assert.equal(thinking.record.outcome, 'success');
  // Cut after some visible text, it is a message to the user, who answers it.
  const talking = await episode(chatty, [
    { content: 'Let me look into', finishReason: 'length' },
    call('approve', { order_id: 1 }),
    'Done. <DONE>',
  ]);
  assert.equal(talking.record.finishReason, 'done');
  assert.deepEqual(
    talking.record.messages.filter((m) => m.role === 'user').map((m) => m.content),
    ['Approve order 1.', 'please go on'],
  );
});

test('the episode budget counts what follows the prompt; once spent, the episode ends and is graded', async () => {
  // The double reports 10 prompt tokens on every call: only the 40 generated tokens count, not the prompt.
  const budget = await episode(task, [{ content: call('approve', { order_id: 2 }), completionTokens: 40 }], {
    episode_token_budget: 60,
  });
  assert.equal(budget.policy.requests[1]!.max_tokens, 20, 'the next turn may only use what is left of the budget');
  assert.equal(budget.record.finishReason, 'token_budget');
  assert.equal(budget.record.toolCalls.length, 2, 'the call of the completion cut by the budget ran');
  assert.ok(budget.record.grade, 'graded');
  assert.equal(budget.record.outcome, 'agent_failure', 'the wrong order was approved');
});

test('the simulated user sees each visible assistant text in the reference prompt; its reply is cleaned', async () => {
  const { record, userDouble } = await episode(
    chatty,
    [`Let me check.\n${call('approve', { order_id: 1 })}`, 'Which other order?', 'Done. <DONE>'],
    {},
    '"User: Only order 1."',
  );
  assert.equal(record.finishReason, 'done');
  const request = userDouble!.requests[0]!;
  assert.equal(request.max_tokens, 4096);
  assert.equal(request.temperature, 0.3);
  assert.match(request.messages[0]!.content, /^\nYou are the USER in a chat with an assistant\./);
  assert.match(
    request.messages[1]!.content,
    /User: Approve order 1\.\n\nAssistant: Let me check\.\n\nAssistant: Which other order\?\n=== END/,
  );
  assert.match(request.messages[1]!.content, /\nUSER_CONTEXT:\nYou want order 1 approved\.\n/);
  assert.match(request.messages[1]!.content, /\nLAST_ASSISTANT_MESSAGE:\nWhich other order\?\n/);
  assert.deepEqual(
    record.messages.filter((m) => m.role === 'user').map((m) => m.content),
    ['Approve order 1.', 'User: Only order 1.'],
    'quotes removed after the role-label check, as the reference orders it',
  );
});

test('the whole-episode wall-clock limit stops a slow agent', async () => {
  // The first generation alone outlasts the limit, so the deadline passes in the agent's own time (the deadline
  // passing during a tool call is a hang of the backend: an infrastructure error, tested elsewhere).
  const { record } = await episode(task, [{ content: call('approve', { order_id: 2 }), delayMs: 2500 }], {
    wall_clock_ms: 1000,
    max_agent_turns: 50,
  });
  assert.equal(record.finishReason, 'wall_clock_timeout', record.cause);
  assert.equal(record.outcome, 'agent_failure');
  assert.ok(record.timings.totalMs < 8000);
});

test('a simulated-user outage is an infrastructure error, never a failure', async () => {
  const { record } = await episode(chatty, ['Which order?'], {}, { status: 503 });
  assert.equal(record.outcome, 'infrastructure_error');
  assert.equal(record.finishReason, 'infrastructure_error');
  assert.match(record.cause!, /503/);
});

test('a policy-server outage is an infrastructure error', async () => {
  const { record } = await episode(task, [{ status: 500 }]);
  assert.equal(record.outcome, 'infrastructure_error');
  assert.match(record.cause!, /policy chat completion failed/);
});

test('a simulated user that hangs past the episode deadline is an infrastructure error, not a failure', async () => {
  const { record } = await episode(
    chatty,
    ['Which order?'],
    { wall_clock_ms: 1500 },
    { content: 'order 1', delayMs: 4000 },
  );
  assert.equal(record.outcome, 'infrastructure_error');
  assert.match(record.cause!, /no answer from user before the episode deadline/);
});

test('a context-length refusal (HTTP 400) ends the episode, graded; other 400s are infrastructure errors', async () => {
  // vLLM's OpenAI server's body for a prompt over --max-model-len.
  const overflow: DoubleReply = {
    status: 400,
    body: {
      error: {
        message: "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens.",
        type: 'BadRequestError',
        code: 400,
      },
    },
  };
  const { record } = await episode(task, [call('approve', { order_id: 1 }), overflow]);
  assert.equal(record.finishReason, 'context_overflow');
  assert.ok(record.grade, 'graded');
  assert.equal(record.outcome, 'success', 'order 1 was approved before the context ran out');
  assert.match(record.contextOverflow ?? '', /maximum context length is 8192/);

  const other = await episode(task, [{ status: 400, body: { error: { message: 'unknown field "foo"' } } }]);
  assert.equal(other.record.outcome, 'infrastructure_error');
});

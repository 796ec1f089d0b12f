import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import type { ToolRoute } from '../../datasets/thinkingbox/episode-tool-routes.ts';
import { referenceMessages, referenceToolCalls } from '../../datasets/thinkingbox/episode-grading.ts';
import { routedToolSession } from '../../datasets/thinkingbox/routed-tool-session.ts';
import type { StartedServer } from '../../datasets/thinkingbox/stdio-server-pool.ts';
import type { EpisodeEnvironment, EpisodeTask, GradeRequest } from '../../rollout/episode-environment.ts';
import { playEpisode } from '../../rollout/episode-runner.ts';
import { episodeDependencies, episodeRunOptions } from '../../rollout/episode-setup.ts';
import type { ChatMessage } from '../../rollout/policy-client.ts';
import { ungradedReport } from '../../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble, type DoubleReply } from '../helpers/openai-wire-double.ts';

/**
 * The episode loop's rules taken from the reference's agent loop (docs/reference-rules.md §2): an end-turn tool
 * among a completion's calls runs none of them; a reasoning-only completion is no message to the user, the agent
 * is asked again; the agent-turn limit counts actions (visible texts, completions with tool calls, direct
 * responses), not completions. Against a ThinkingBox-style tool session (a builtin end-turn tool, server tools on
 * a recording stand-in server) and a policy double that speaks the OpenAI wire protocol.
 */

const doubles: OpenAIWireProtocolDouble[] = [];
after(async () => Promise.all(doubles.map((d) => d.stop())));

const object = (properties: Record<string, unknown> = {}) => ({ type: 'object', properties });

/** A tool server that answers every call and records which tools were called, in order. */
function recordingServer(called: string[]): StartedServer {
  const client = {
    async callTool({ name }: { name: string }) {
      called.push(name);
      return { content: [{ type: 'text', text: JSON.stringify({ id: 1, status: 'shipped' }) }] };
    },
  };
  return { name: 'shop', client, pid: null, started: 'process', startMs: 0, stderrTail: () => '' } as never;
}

function routes(server: StartedServer): Map<string, ToolRoute> {
  const spec = (name: string, properties?: Record<string, unknown>) => ({
    name,
    description: name,
    inputSchema: object(properties),
  });
  const onServer = (name: string, extra: { endTurn?: boolean; directResponse?: string } = {}): ToolRoute => ({
    kind: 'server',
    server,
    spec: spec(name, { id: { type: 'integer' } }),
    endTurn: extra.endTurn ?? false,
    ...(extra.directResponse ? { directResponse: extra.directResponse } : {}),
  });
  return new Map<string, ToolRoute>([
    [
      'InjectionAttackInToolResponse',
      {
        kind: 'builtin',
        spec: spec('InjectionAttackInToolResponse', { reason: { type: 'string' } }),
        endTurn: true,
      },
    ],
    ['lookup_order', onServer('lookup_order')],
    ['cancel_order', onServer('cancel_order')],
    ['escalate', onServer('escalate', { endTurn: true })],
    ['order_card', onServer('order_card', { directResponse: 'Order {id} is {status}.' })],
  ]);
}

interface Played {
  record: Awaited<ReturnType<typeof playEpisode>>;
  policy: OpenAIWireProtocolDouble;
  /** Tools called on the server, in order. */
  called: string[];
  /** What grading was handed. */
  graded?: GradeRequest;
  /** Every observation the loop handed the policy driver, per call. */
  observed: ChatMessage[][];
}

/** An imported-suite episode (the reference's two system messages, the dataset's tools, no `end_turn` of ours). */
async function episode(
  script: DoubleReply[],
  limits: { max_agent_turns?: number; max_user_turns?: number } = {},
  user: Pick<EpisodeTask, 'user_context' | 'user_replies'> = {},
): Promise<Played> {
  const policy = new OpenAIWireProtocolDouble((_b, i) => script[Math.min(i, script.length - 1)]!);
  doubles.push(policy);
  const played: Omit<Played, 'record'> = { policy, called: [], observed: [] };
  const { tools } = routedToolSession(routes(recordingServer(played.called)), 10_000);
  const environment: EpisodeEnvironment = {
    systemMessages: ['You are an AI Agent. End with <DONE>.', 'You help the customers of a shop.'],
    examples: [],
    gradeTimeoutMs: 10_000,
    async open() {
      return {
        tools,
        async grade(request) {
          played.graded = request;
          return { ...ungradedReport(), outcome: 'success', reward: 1, stateMatches: true };
        },
        close: async () => {},
      };
    },
  };
  const task: EpisodeTask = {
    uid: 'shop.py:test_cancel',
    query: 'Cancel order 1.',
    ...user,
    limits: { max_user_turns: limits.max_user_turns ?? 10, max_agent_turns: limits.max_agent_turns ?? null },
  };
  const config = episodeConfigSchema.parse({
    policy: { base_url: await policy.start(), model: 'policy-double', timeout_ms: 10_000 },
    limits: { wall_clock_ms: 60_000, episode_token_budget: 4096 },
    // The task's own replies (user_replies), so that the policy double's script is the agent's alone.
    user: { mode: 'scripted' },
  });
  const deps = episodeDependencies(config, environment, task);
  const observe = deps.policy.observe.bind(deps.policy);
  deps.policy.observe = async (messages) => {
    played.observed.push(messages);
    return observe(messages);
  };
  const record = await playEpisode(deps, task, 'test:loop-rules', episodeRunOptions(config));
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  return { ...played, record };
}

const call = (name: string, args: unknown = { id: 1 }) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
const chatty = { user_context: 'You want order 1 cancelled.', user_replies: ['order 1', 'yes', 'go on', 'hello?'] };
const userTexts = (p: Played) => p.record.messages.filter((m) => m.role === 'user').map((m) => m.content);

test('an end-turn tool among the calls: none of them runs, the episode ends and is graded', async () => {
  const played = await episode([
    `This tool response asks me to cancel everything.\n${call('cancel_order')}\n` +
      call('InjectionAttackInToolResponse', { reason: 'the result holds an instruction' }),
    'never asked',
  ]);
  const { record, graded } = played;
  assert.equal(record.finishReason, 'end_turn');
  assert.deepEqual(played.called, [], 'cancel_order, before the end-turn call, did not run');
  assert.equal(played.policy.requests.length, 1);
  assert.ok(record.grade, 'graded, as the reference runs the test whatever the finish reason');
  assert.deepEqual(
    record.toolCalls.map((c) => [c.name, c.arguments, c.result, c.isError]),
    [['InjectionAttackInToolResponse', { reason: 'the result holds an instruction' }, '', false]],
    'only the end-turn call is recorded, with an empty response',
  );
  // What the test code reads: both calls in x.messages, no tool response; x.tool_calls the end-turn call alone.
  const messages = referenceMessages(graded!.messages!, []);
  assert.deepEqual(
    messages.filter((m) => m.T !== 'Text' || m.role === 'assistant').map((m) => m.T),
    ['Text', 'ParallelToolCall'],
  );
  const parallel = messages.find((m) => m.T === 'ParallelToolCall');
  assert.ok(parallel?.T === 'ParallelToolCall');
  assert.deepEqual(
    parallel.tool_calls.map((c) => c.name),
    ['cancel_order', 'InjectionAttackInToolResponse'],
  );
  const toolCalls = referenceToolCalls(graded!.toolCalls, messages);
  assert.deepEqual(
    toolCalls.map((c) => [c.tool_call.name, c.tool_call.id, c.tool_response.content]),
    [['InjectionAttackInToolResponse', parallel.tool_calls[1]!.id, '']],
  );
  assert.equal(graded!.lastAssistantText, 'This tool response asks me to cancel everything.', 'x.response');
});

test("a scenario's is_end_turn tool after another call: neither reaches the server", async () => {
  const played = await episode([`${call('lookup_order')}\n${call('escalate')}`, 'never asked']);
  assert.equal(played.record.finishReason, 'end_turn');
  assert.deepEqual(played.called, []);
  assert.deepEqual(
    played.record.toolCalls.map((c) => [c.name, c.result]),
    [['escalate', '']],
  );
});

test('a reasoning-only completion is no message to the user: the agent is asked again, reasoning kept', async () => {
  const thought = '<think>The user wants order 1 cancelled. I should call cancel_order.</think>';
  const played = await episode([thought, call('cancel_order'), 'Order 1 is cancelled. <DONE>'], {}, chatty);
  assert.equal(played.record.finishReason, 'done');
  assert.deepEqual(userTexts(played), ['Cancel order 1.'], 'the simulated user was never asked');
  assert.equal(played.policy.requests.length, 3);
  assert.deepEqual(
    played.policy.requests[1]!.messages.slice(-2).map((m) => [m.role, m.content]),
    [
      ['user', 'Cancel order 1.'],
      ['assistant', thought],
    ],
    'asked again with the reasoning as the last message, nothing appended after it',
  );
  assert.deepEqual(played.observed[0], [], 'the finished turn is closed and a new one opened (token mode)');
  assert.deepEqual(played.called, ['cancel_order']);

  // Without a simulated user, reasoning alone does not end the episode as a single-turn answer would.
  const alone = await episode(['<think>Let me plan.</think>', 'Order 1 is cancelled.']);
  assert.equal(alone.record.finishReason, 'single_turn');
  assert.equal(alone.policy.requests.length, 2);
  assert.equal(alone.graded!.lastAssistantText, 'Order 1 is cancelled.');
});

test('reasoning-only completions do not count toward the agent-turn limit', async () => {
  const played = await episode(['<think>Hmm.</think>', '<think>Hmm, still.</think>', 'Order 1 is cancelled. <DONE>'], {
    max_agent_turns: 1,
  });
  assert.equal(played.record.finishReason, 'done');
  assert.equal(played.policy.requests.length, 3);
});

test('the agent-turn limit counts actions: a visible text and the tool calls of one completion are two', async () => {
  const script = [`Let me look it up.\n${call('lookup_order')}`, call('cancel_order'), 'Done. <DONE>'];
  const two = await episode(script, { max_agent_turns: 2 });
  assert.equal(two.record.finishReason, 'agent_turn_limit');
  assert.equal(two.policy.requests.length, 1, 'no completion after the limit');
  assert.deepEqual(two.called, ['lookup_order'], 'the calls of the action that reached the limit ran');
  assert.ok(two.record.grade, 'graded');

  // The text alone reaches the limit: the completion's calls do not run.
  const one = await episode(script, { max_agent_turns: 1 });
  assert.equal(one.record.finishReason, 'agent_turn_limit');
  assert.deepEqual(one.called, []);
  assert.deepEqual(one.record.toolCalls, []);
  // ... unless that text ends with <DONE>.
  const done = await episode([`All set. <DONE>\n${call('lookup_order')}`], { max_agent_turns: 1 });
  assert.equal(done.record.finishReason, 'done');
  assert.deepEqual(done.called, []);
});

test('a message to the user that reaches the limit ends the episode before the user is asked', async () => {
  const played = await episode(['Which order?', 'Which order again?', 'Done. <DONE>'], { max_agent_turns: 2 }, chatty);
  assert.equal(played.record.finishReason, 'agent_turn_limit');
  assert.deepEqual(userTexts(played), ['Cancel order 1.', 'order 1']);
  assert.equal(played.policy.requests.length, 2);
});

test('a direct response is an action of its own', async () => {
  const played = await episode([call('order_card'), 'never asked'], { max_agent_turns: 2 });
  assert.equal(played.record.finishReason, 'agent_turn_limit');
  assert.equal(played.policy.requests.length, 1);
  assert.deepEqual(
    played.record.messages.slice(-2).map((m) => [m.role, m.content]),
    [
      ['tool', '{"id":1,"status":"shipped"}'],
      ['assistant', 'Order 1 is shipped.'],
    ],
  );
});

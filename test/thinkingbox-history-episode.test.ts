import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { episodeConfigSchema } from '../config/episode-config.ts';
import type { ImportedTask } from '../config/thinkingbox-schema.ts';
import type { ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxEnvironment } from '../datasets/thinkingbox/thinkingbox-environment.ts';
import { episodeDependencies, episodeRunOptions } from '../rollout/episode-setup.ts';
import { playEpisode } from '../rollout/episode-runner.ts';
import { fixtureResources, importFixtureSuite } from './helpers/thinkingbox-fixture.ts';
import { OpenAIWireProtocolDouble, type ChatRequestBody } from './helpers/openai-wire-double.ts';

/**
 * A ThinkingBox task's history and direct responses in an episode against the fixture's real servers (no
 * Postgres, no Temporal): the history's tool calls are replayed into the servers before the agent starts, its
 * messages come before the query, and a `direct_response` tool is called on its server, its template filled from
 * the JSON result and shown as an assistant message (and in `x.tool_direct_responses`).
 */

const resources = fixtureResources();
const doubles: OpenAIWireProtocolDouble[] = [];
let suite: ThinkingBoxSuite;

before(() => {
  suite = importFixtureSuite('tbt-tb-history-');
});
after(async () => {
  await resources.servers.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

const toolCall = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

async function episode(uid: string, script: string[]) {
  const task = suite.tasks.find((t) => t.uid === uid) as ImportedTask;
  assert.ok(task, uid);
  const requests: ChatRequestBody[] = [];
  const double = new OpenAIWireProtocolDouble((body, i) => {
    requests.push(body as ChatRequestBody);
    return script[Math.min(i, script.length - 1)]!;
  });
  doubles.push(double);
  const config = episodeConfigSchema.parse({
    policy: { base_url: await double.start(), model: 'policy-double', timeout_ms: 10_000 },
    user: { mode: 'scripted' },
    limits: { max_agent_turns: 6, wall_clock_ms: 120_000 },
  });
  const environment = thinkingboxEnvironment(resources, suite, task);
  const record = await playEpisode(
    episodeDependencies(config, environment, task),
    task,
    `test:tb-history:${uid}`,
    episodeRunOptions(config),
  );
  return { record, requests };
}

test('history: its tool calls are replayed into the servers first, and its messages precede the query', async () => {
  const uid = 'circulation.py:test_renew_calvino_after_history';
  const renew = toolCall('renew_loan', { loan_id: 'L0005', new_due_date: '2025-04-15' });
  const { record, requests } = await episode(uid, [renew, 'Renewed until 2025-04-15. <DONE>']);
  assert.equal(record.outcome, 'success', record.cause);
  assert.equal(record.toolCalls.length, 1, "replayed calls are not the agent's calls");
  assert.equal(record.toolCalls[0]!.isError, false, "L0005 exists: the history's checkout was replayed");

  const sent = requests[0]!.messages.filter((m) => m.role !== 'system');
  assert.deepEqual(
    sent.map((m) => m.role),
    ['user', 'assistant', 'tool', 'assistant', 'user'],
    'history (text, call, result, reply), then the query',
  );
  const call = sent[1] as { tool_calls?: { id?: string; function: { name: string; arguments: string } }[] };
  assert.equal(call.tool_calls![0]!.function.name, 'checkout_book');
  assert.equal((sent[2] as { tool_call_id?: string }).tool_call_id, call.tool_calls![0]!.id);
  assert.match(sent[4]!.content as string, /renew Invisible Cities/);

  const idle = await episode(uid, ['Nothing to do. <DONE>']);
  assert.equal(idle.record.outcome, 'agent_failure', 'the replayed checkout alone is not the golden state');
});

test('direct_response: the server answers, its JSON fills the template, shown as an assistant message', async () => {
  const { record, requests } = await episode('circulation.py:test_opening_hours', [
    toolCall('opening_hours', {}),
    'Anything else I can help with? <DONE>',
  ]);
  const expected = 'The library is open 9:00-18:00, Monday to Saturday, and closed on Sundays.';
  assert.deepEqual(JSON.parse(record.toolCalls[0]!.result), {
    open: '9:00',
    close: '18:00',
    days: 'Monday to Saturday',
  });
  const tail = requests[1]!.messages.slice(-2);
  assert.deepEqual(
    tail.map((m) => [m.role, m.role === 'tool' ? 'json' : m.content]),
    [
      ['tool', 'json'],
      ['assistant', expected],
    ],
    'the raw result goes to the agent, then the direct response as an assistant message',
  );
  // The test function asserts x.tool_direct_responses == [expected].
  assert.equal(record.outcome, 'success', record.cause);
});

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import { taskSchema } from '../../config/task-schema.ts';
import { episodeView } from '../../core/report/episode-view.ts';
import { USER_SIMULATOR_SYSTEM } from '../../core/user-simulator-prompt.ts';
import type { EpisodeEnvironment } from '../../rollout/episode-environment.ts';
import { referenceFinishReason } from '../../rollout/episode-result-line.ts';
import { playEpisode } from '../../rollout/episode-runner.ts';
import { episodeDependencies, episodeRunOptions } from '../../rollout/episode-setup.ts';
import { OpenAIWireProtocolDouble, type ChatRequestBody } from '../helpers/openai-wire-double.ts';

/**
 * The simulated user by default is the reference's: an LLM (played by the policy's own server when the config names
 * no user endpoint), so a conversational task — every imported ThinkingBox task has a user context — gets its
 * replies. The scripted user stays for offline tests, and its running out of replies is said, not hidden.
 */

const doubles: OpenAIWireProtocolDouble[] = [];
after(async () => Promise.all(doubles.map((d) => d.stop())));

/** A backend without tools whose grading passes: only the conversation matters here. */
const environment: EpisodeEnvironment = {
  instructions: 'Lend books.',
  examples: [],
  gradeTimeoutMs: 10_000,
  async open() {
    return {
      tools: { listTools: async () => [], callTool: async () => ({ text: '', isError: false }), close: async () => {} },
      grade: async () =>
        ({
          outcome: 'success',
          reward: 1,
          stateMatches: true,
          resultHash: 'h',
          goldenHash: 'h',
          diff: [],
          assertions: [],
          rubrics: [],
        }) as never,
      async close() {},
    };
  },
};

const task = taskSchema.parse({
  uid: 'library/lend-1',
  scenario: 'library',
  query: 'I want to borrow a book.',
  user_context: 'You are Priya (M02). You want "The Left Hand of Darkness".',
  golden: [],
});

const isUserSimulator = (body: ChatRequestBody) => body.messages[0]?.content === USER_SIMULATOR_SYSTEM;

/** One server that plays the agent (asks, then lends) and, when asked with the simulator's prompt, the user. */
async function policyServer(): Promise<OpenAIWireProtocolDouble & { url: string }> {
  let agentTurns = 0;
  const double = new OpenAIWireProtocolDouble((body) => {
    if (isUserSimulator(body)) return 'The Left Hand of Darkness, please.';
    return agentTurns++ === 0 ? 'Which book would you like?' : 'It is lent to you. <DONE>';
  });
  doubles.push(double);
  return Object.assign(double, { url: await double.start() });
}

test('an episode config without a user gets the LLM simulated user at the reference temperature and cap', () => {
  const config = episodeConfigSchema.parse({ policy: { base_url: 'http://policy/v1', model: 'p' } });
  assert.deepEqual(config.user, { mode: 'llm', temperature: 0.3, max_tokens: 4096 });
  assert.deepEqual(
    episodeConfigSchema.parse({ policy: { base_url: 'http://policy/v1', model: 'p' }, user: { mode: 'scripted' } })
      .user,
    { mode: 'scripted' },
    'the scripted user stays when asked for',
  );
});

test("by default the user replies, played by the policy's server, on to the agent's end", async () => {
  const server = await policyServer();
  const config = episodeConfigSchema.parse({ policy: { base_url: server.url, model: 'double', timeout_ms: 10_000 } });
  const record = await playEpisode(
    episodeDependencies(config, environment, task),
    task,
    'test:user-default',
    episodeRunOptions(config),
  );
  assert.equal(record.finishReason, 'done');
  const userRequests = server.requests.filter(isUserSimulator);
  assert.equal(userRequests.length, 1, "the policy's server was asked for the user's reply");
  assert.equal(userRequests[0]!.model, 'double');
  assert.equal(userRequests[0]!.temperature, 0.3);
  assert.match(userRequests[0]!.messages[1]!.content, /You are Priya \(M02\)/, 'with the private user context');
  assert.deepEqual(
    record.messages.filter((m) => m.role === 'user').map((m) => m.content),
    ['I want to borrow a book.', 'The Left Hand of Darkness, please.'],
  );
  assert.equal(record.usage.user.calls, 1);
});

test('a scripted user out of replies ends the episode visibly: own finish reason, a note, no_user_llm', async () => {
  const server = await policyServer();
  const config = episodeConfigSchema.parse({
    policy: { base_url: server.url, model: 'double', timeout_ms: 10_000 },
    user: { mode: 'scripted' },
  });
  const record = await playEpisode(
    episodeDependencies(config, environment, task),
    task,
    'test:user-scripted',
    episodeRunOptions(config),
  );
  assert.equal(record.finishReason, 'user_script_ended', 'not a limit, not the agent: the script ran out');
  assert.equal(server.requests.filter(isUserSimulator).length, 0);
  assert.equal(referenceFinishReason(record.finishReason), 'no_user_llm');
  const view = episodeView({
    id: 'test:user-scripted',
    taskUid: task.uid,
    suite: 's',
    scenario: 'library',
    domain: 'library',
    purpose: 'adhoc',
    campaign: null,
    step: null,
    repetition: 0,
    status: record.outcome,
    policyModel: 'double',
    startedAt: null,
    finishedAt: null,
    record: record as never,
  });
  assert.ok(
    view.notes.some((n) => n.startsWith('The scripted user had no reply left (it gave 0 replies)')),
    view.notes.join(' | '),
  );
});

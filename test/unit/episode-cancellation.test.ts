import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import { taskSchema } from '../../config/task-schema.ts';
import type { EpisodeEnvironment, OpenedEnvironment } from '../../rollout/episode-environment.ts';
import { playEpisode } from '../../rollout/episode-runner.ts';
import { episodeDependencies, episodeRunOptions } from '../../rollout/episode-setup.ts';
import { SlowOpenAIEndpoint } from '../helpers/episode-cancellation-endpoint.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * An abandoned episode (its signal aborted: the activity was cancelled) stops at once wherever it waits: a policy
 * generation (chat or token mode), a simulated user's reply, a judge's verdict during grading, or the backend being
 * opened. The in-flight HTTP request is aborted (the server sees the client go), the backend is released, and the
 * episode rejects with the signal's reason instead of returning a record (an interrupted episode is never graded).
 */

const stoppers: (() => Promise<void>)[] = [];
after(async () => Promise.all(stoppers.map((stop) => stop())));

/** An endpoint that answers nothing within the test. */
async function silentEndpoint(): Promise<{ endpoint: SlowOpenAIEndpoint; url: string }> {
  const endpoint = new SlowOpenAIEndpoint(10 * 60_000);
  stoppers.push(() => endpoint.stop());
  return { endpoint, url: await endpoint.start() };
}

async function answering(reply: string): Promise<string> {
  const double = new OpenAIWireProtocolDouble(() => reply);
  stoppers.push(() => double.stop());
  return double.start();
}

/** A backend without tools whose grading asks the judge one question; it notes when it is released. */
function fakeEnvironment(openDelayMs = 0): { environment: EpisodeEnvironment; released: { at?: number } } {
  const released: { at?: number } = {};
  const opened: OpenedEnvironment = {
    tools: { listTools: async () => [], callTool: async () => ({ text: '', isError: false }), close: async () => {} },
    async grade({ judge, lastAssistantText }) {
      const verdict = await judge!.ask('Is the reply polite?', lastAssistantText);
      return { outcome: verdict.yes ? 'success' : 'agent_failure', reward: verdict.yes ? 1 : 0, rubrics: [] } as never;
    },
    async close() {
      released.at = Date.now();
    },
  };
  const environment: EpisodeEnvironment = {
    instructions: 'Be polite.',
    examples: [],
    gradeTimeoutMs: 60_000,
    async open() {
      await delay(openDelayMs);
      return opened;
    },
  };
  return { environment, released };
}

const task = taskSchema.parse({
  uid: 'cancel/greet',
  scenario: 'greet',
  query: 'Say hello.',
  user_context: 'You want a greeting.',
  golden: [],
});

/**
 * Plays the episode, aborts it once `waiting()` says it waits where the case wants it, and checks what an
 * abandoned episode must do. Before the abort, every endpoint that answers does so at once.
 */
async function abandonWhile(
  config: Record<string, unknown>,
  waiting: () => boolean,
  openDelayMs = 0,
): Promise<{ released: { at?: number }; abortedAt: number }> {
  const parsed = episodeConfigSchema.parse({ limits: { max_agent_turns: 4, wall_clock_ms: 120_000 }, ...config });
  const { environment, released } = fakeEnvironment(openDelayMs);
  const controller = new AbortController();
  const reason = new Error('cancelled by the test');
  const deps = episodeDependencies(parsed, environment, task, controller.signal);
  const playing = playEpisode(deps, task, 'episode:cancel', episodeRunOptions(parsed, 'cancel'));
  playing.catch(() => undefined);
  const deadline = Date.now() + 10_000;
  while (!waiting()) {
    if (Date.now() > deadline) assert.fail('the episode never reached the point the case aborts at');
    await delay(20);
  }
  const abortedAt = Date.now();
  controller.abort(reason);
  const outcome = playing.then(
    () => 'returned a record',
    (err: unknown) => err,
  );
  const ended = await Promise.race([outcome, delay(3000, 'hung')]);
  assert.equal(ended, reason, 'the episode rejects with the abort reason at once');
  assert.ok(Date.now() - abortedAt < 2000);
  return { released, abortedAt };
}

async function assertClosedSoon(endpoint: SlowOpenAIEndpoint, abortedAt: number): Promise<void> {
  for (let i = 0; i < 50 && endpoint.requests[0]?.abortedAt === undefined; i++) await delay(20);
  const closedAt = endpoint.requests[0]?.abortedAt;
  assert.ok(closedAt !== undefined, 'the in-flight request was aborted (the server saw the client go)');
  assert.ok(closedAt - abortedAt < 2000);
}

test('abandoned during a chat generation: the request is aborted and the backend released', async () => {
  const { endpoint, url } = await silentEndpoint();
  const policy = { base_url: url, model: 'silent', timeout_ms: 60_000 };
  const { released, abortedAt } = await abandonWhile({ policy }, () => endpoint.requests.length > 0);
  assert.ok(released.at !== undefined, 'the backend was released');
  await assertClosedSoon(endpoint, abortedAt);
});

test('abandoned during a token-mode render: the /tokenize request is aborted', async () => {
  const { endpoint, url } = await silentEndpoint();
  const policy = { base_url: url, model: 'silent', mode: 'tokens', timeout_ms: 60_000 };
  const { released, abortedAt } = await abandonWhile({ policy }, () => endpoint.requests.length > 0);
  assert.equal(endpoint.requests[0]!.path, '/tokenize');
  assert.ok(released.at !== undefined, 'the backend was released');
  await assertClosedSoon(endpoint, abortedAt);
});

test("abandoned while the simulated user writes its reply: the user model's request is aborted", async () => {
  const { endpoint, url } = await silentEndpoint();
  const policy = { base_url: await answering('Hello! What else can I do?'), model: 'double', timeout_ms: 60_000 };
  const user = { mode: 'llm', endpoint: { base_url: url, model: 'silent', timeout_ms: 60_000 } };
  const { released, abortedAt } = await abandonWhile({ policy, user }, () => endpoint.requests.length > 0);
  assert.ok(released.at !== undefined, 'the backend was released');
  await assertClosedSoon(endpoint, abortedAt);
});

test("abandoned while the judge grades: the judge's request is aborted, nothing is graded", async () => {
  const { endpoint, url } = await silentEndpoint();
  const policy = { base_url: await answering('Hello! <DONE>'), model: 'double', timeout_ms: 60_000 };
  const judge = { base_url: url, model: 'silent', timeout_ms: 60_000 };
  const { released, abortedAt } = await abandonWhile({ policy, judge }, () => endpoint.requests.length > 0);
  assert.ok(released.at !== undefined, 'the backend was released');
  await assertClosedSoon(endpoint, abortedAt);
});

test('abandoned while its backend is being opened: the backend is released as soon as it arrives', async () => {
  const policy = { base_url: await answering('Hello! <DONE>'), model: 'double', timeout_ms: 60_000 };
  const started = Date.now();
  const { released } = await abandonWhile({ policy }, () => Date.now() - started > 100, 500);
  assert.equal(released.at, undefined, 'not released before it exists');
  await delay(600);
  assert.ok(released.at !== undefined, 'the late backend was released');
});

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import type { ToolRoute } from '../../datasets/thinkingbox/episode-tool-routes.ts';
import { routedToolSession } from '../../datasets/thinkingbox/routed-tool-session.ts';
import type { StartedServer } from '../../datasets/thinkingbox/stdio-server-pool.ts';
import type { EpisodeEnvironment, EpisodeTask } from '../../rollout/episode-environment.ts';
import { playResumed } from '../../rollout/episode-recording.ts';
import { playEpisode, type EpisodeRecord } from '../../rollout/episode-runner.ts';
import { episodeDependencies, episodeRunOptions } from '../../rollout/episode-setup.ts';
import { ReplayDiverged, replayableTurns, type TurnCheckpoint } from '../../rollout/turn-checkpoints.ts';
import { ungradedReport } from '../../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * Turn-level resume in the episode loop (rollout/turn-checkpoints.ts): an attempt that dies after some turns leaves
 * checkpoints; a new attempt replays them against a fresh backend whose state lives in memory, restores it call by
 * call, and goes on live; the result equals an episode that never stopped. A server that answers differently on
 * replay makes the episode start over from the prompt, with the reason in its record.
 */

const doubles: OpenAIWireProtocolDouble[] = [];
after(async () => Promise.all(doubles.map((d) => d.stop())));

/**
 * A tool server that keeps a shopping cart in memory (lost with its process, as a ThinkingBox server's state is).
 * `nonce` makes its answers differ between processes: a server that is not deterministic.
 */
function cartServer(calls: string[], nonce?: string): StartedServer {
  const cart: string[] = [];
  const client = {
    async callTool({ name, arguments: args }: { name: string; arguments: { item?: string } }) {
      calls.push(name);
      if (name === 'add_item') cart.push(String(args.item));
      const text = JSON.stringify({ cart, ...(nonce ? { request_id: nonce } : {}) });
      return { content: [{ type: 'text', text }] };
    },
  };
  return { name: 'shop', client, pid: null, started: 'process', startMs: 0, stderrTail: () => '' } as never;
}

function routes(server: StartedServer): Map<string, ToolRoute> {
  const spec = (name: string) => ({
    name,
    description: name,
    inputSchema: { type: 'object', properties: { item: { type: 'string' } } },
  });
  const onServer = (name: string): ToolRoute => ({ kind: 'server', server, spec: spec(name), endTurn: false });
  return new Map([
    ['add_item', onServer('add_item')],
    ['show_cart', onServer('show_cart')],
  ]);
}

const call = (name: string, item?: string) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: item ? { item } : {} })}\n</tool_call>`;
/** Five completions: three tool turns, one message to the user (who replies), then the end. */
const SCRIPT = [
  call('add_item', 'apple'),
  call('add_item', 'pear'),
  'I added an apple and a pear. Anything else?',
  call('show_cart'),
  'Your cart holds an apple and a pear. <DONE>',
];
const task: EpisodeTask = {
  uid: 'shop.py:test_cart',
  query: 'Put an apple and a pear in my cart.',
  user_context: 'You want fruit.',
  user_replies: ['Show me the cart.'],
  limits: { max_user_turns: 5, max_agent_turns: null },
};

interface Attempt {
  record?: EpisodeRecord;
  error?: unknown;
  saved: TurnCheckpoint[];
  policy: OpenAIWireProtocolDouble;
  /** Tool calls the backend received, in order. */
  calls: string[];
  /** The backend's final state, as grading read it. */
  gradedCart?: string;
}

/**
 * One attempt of the episode on a fresh backend: it replays `replay`, saves its turns, and dies (its activity
 * abandoned, as a killed worker's would be) once it has saved `dieAfter` turns.
 */
async function attempt(options: { replay?: TurnCheckpoint[]; dieAfter?: number; nonce?: string }): Promise<Attempt> {
  const from = options.replay?.length ?? 0;
  const policy = new OpenAIWireProtocolDouble((_b, i) => SCRIPT[from + i]!);
  doubles.push(policy);
  const played: Attempt = { saved: [], policy, calls: [] };
  const server = cartServer(played.calls, options.nonce);
  const { tools } = routedToolSession(routes(server), 10_000);
  const environment: EpisodeEnvironment = {
    systemMessages: ['You are a shop assistant. End with <DONE>.'],
    examples: [],
    gradeTimeoutMs: 10_000,
    async open() {
      return {
        tools,
        async grade() {
          const shown = await tools.callTool('show_cart', {});
          played.gradedCart = shown.text;
          return { ...ungradedReport(), outcome: 'success', reward: 1, stateMatches: true };
        },
        close: async () => {},
      };
    },
  };
  const config = episodeConfigSchema.parse({
    policy: { base_url: await policy.start(), model: 'policy-double', timeout_ms: 10_000 },
    limits: { wall_clock_ms: 60_000, episode_token_budget: 4096 },
    user: { mode: 'scripted' },
  });
  const abandon = new AbortController();
  const deps = episodeDependencies(config, environment, task, abandon.signal);
  deps.replay = options.replay;
  deps.saveTurn = async (checkpoint) => {
    played.saved.push(structuredClone(checkpoint));
    if (played.saved.length === options.dieAfter) abandon.abort(new Error('worker killed'));
  };
  try {
    played.record = await playEpisode(deps, task, 'test:resume', episodeRunOptions(config));
  } catch (err) {
    played.error = err;
  }
  return played;
}

/** What makes two records the same episode: the conversation, the tool calls and results, the grade. */
const essence = (r: EpisodeRecord) => ({
  outcome: r.outcome,
  finishReason: r.finishReason,
  messages: r.messages,
  completions: r.completions,
  toolCalls: r.toolCalls,
  usage: r.usage.policy,
});

test('an episode killed after three turns resumes at turn 3 with its in-memory tool state restored', async () => {
  const whole = await attempt({});
  assert.equal(whole.record?.outcome, 'success', whole.record?.cause);
  assert.equal(whole.saved.length, 4, 'every turn but the last, which ended the episode, was saved');

  const killed = await attempt({ dieAfter: 3 });
  assert.match(String(killed.error), /worker killed/, 'the attempt was abandoned, nothing graded');
  assert.deepEqual(
    killed.saved.map((t) => [t.turn, t.toolResults.map((r) => r.name), t.userReply?.text]),
    [
      [0, ['add_item'], undefined],
      [1, ['add_item'], undefined],
      [2, [], 'Show me the cart.'],
    ],
  );
  assert.ok(killed.saved.every((t, i) => i === 0 || t.elapsedMs >= killed.saved[i - 1]!.elapsedMs));

  const resumed = await attempt({ replay: killed.saved });
  assert.equal(resumed.record?.outcome, 'success', resumed.record?.cause);
  assert.deepEqual(essence(resumed.record!), essence(whole.record!), 'the same episode as one that never stopped');
  assert.equal(resumed.policy.requests.length, 2, 'turns 0-2 were replayed, not sampled again: turns 3 and 4 live');
  assert.deepEqual(
    resumed.calls.slice(0, 2),
    ['add_item', 'add_item'],
    'the fresh server got the recorded calls again, in order',
  );
  assert.equal(resumed.gradedCart, whole.gradedCart, 'the terminal state is the one the episode built');
  assert.match(resumed.gradedCart!, /apple.*pear/);
  assert.deepEqual(
    resumed.saved.map((t) => t.turn),
    [3],
    'a resumed attempt saves only the turns it plays live',
  );
});

test('a tool server that answers differently on replay rejects the resume with the turn and both answers', async () => {
  const killed = await attempt({ dieAfter: 2, nonce: 'first-process' });
  const resumed = await attempt({ replay: killed.saved, nonce: 'second-process' });
  assert.ok(resumed.error instanceof ReplayDiverged, String(resumed.error));
  assert.match(
    (resumed.error as Error).message,
    /^turn 0: add_item returned .*second-process.* on replay, .*first-process.* when recorded$/,
  );
  assert.equal(resumed.policy.requests.length, 0, 'nothing was sampled on the diverged replay');
});

test('a diverged replay starts the episode over from its prompt, and the record says why', async () => {
  const killed = await attempt({ dieAfter: 2, nonce: 'first-process' });
  const tries: number[] = [];
  const forgotten: boolean[] = [];
  const record = await playResumed(
    killed.saved,
    async (replay) => {
      tries.push(replay.length);
      const a = await attempt({ replay, nonce: 'second-process' });
      if (a.error) throw a.error;
      return a.record!;
    },
    { attemptId: 'host:1:2:x', weightVersion: undefined, log: () => {}, forget: async () => void forgotten.push(true) },
  );
  assert.deepEqual(tries, [2, 0], 'replayed two turns, diverged, then played from the prompt');
  assert.deepEqual(forgotten, [true], 'the saved turns were forgotten before the restart');
  assert.equal(record.outcome, 'success');
  assert.equal(record.resume?.length, 1);
  const entry = record.resume![0]!;
  assert.equal(entry.fromTurn, 0);
  assert.equal(entry.savedTurns, 2);
  assert.match(entry.restartedFromPrompt ?? '', /^replay diverged: turn 0: add_item returned/);
});

test('a resume records the turn it went on from and the calls it replayed', async () => {
  const killed = await attempt({ dieAfter: 3 });
  const record = await playResumed(killed.saved, async (replay) => (await attempt({ replay })).record!, {
    attemptId: 'host:1:2:y',
    weightVersion: undefined,
    log: () => {},
    forget: async () => assert.fail('kept'),
  });
  assert.deepEqual(record.resume, [{ attempt: 'host:1:2:y', fromTurn: 3, savedTurns: 3, replayedToolCalls: 2 }]);
});

test('only a gapless run of turns from 0 sampled by this attempt’s weights is replayed', () => {
  const turn = (n: number, weightVersion?: number) =>
    ({ turn: n, elapsedMs: n, weightVersion, toolResults: [], generation: {} }) as unknown as TurnCheckpoint;
  assert.deepEqual(
    replayableTurns([turn(1, 3), turn(0, 3), turn(3, 3)], 3).turns.map((t) => t.turn),
    [0, 1],
    'sorted, and cut at the first gap',
  );
  const older = replayableTurns([turn(0, 2), turn(1, 3)], 3);
  assert.deepEqual(older.turns, []);
  assert.equal(older.refused, 'turn 0 was sampled by weight version 2, this attempt samples version 3');
});

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { episodeConfigSchema } from '../config/episode-config.ts';
import type { ImportedTask } from '../config/thinkingbox-schema.ts';
import type { ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxEnvironment } from '../datasets/thinkingbox/thinkingbox-environment.ts';
import { playResumed } from '../rollout/episode-recording.ts';
import { playEpisode, type EpisodeRecord } from '../rollout/episode-runner.ts';
import { episodeDependencies, episodeRunOptions } from '../rollout/episode-setup.ts';
import type { TurnCheckpoint } from '../rollout/turn-checkpoints.ts';
import { fixtureResources, importFixtureSuite } from './helpers/thinkingbox-fixture.ts';
import { OpenAIWireProtocolDouble } from './helpers/openai-wire-double.ts';

/**
 * Turn-level resume against the fixture's real ThinkingBox servers, whose state lives in their processes' memory
 * (no Postgres, no Temporal): an episode killed after it returned a book resumes on fresh server processes, the
 * return is replayed into them, and the live checkout that follows lands on the restored state, so the test's
 * golden-state check passes only if the restore happened. A recorded answer the fresh server does not give again
 * makes the episode start over from its prompt, with the reason in the record.
 */

const resources = fixtureResources();
const doubles: OpenAIWireProtocolDouble[] = [];
let suite: ThinkingBoxSuite;

before(() => {
  suite = importFixtureSuite('tbt-tb-resume-');
});
after(async () => {
  await resources.servers.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

const UID = 'circulation.py:test_swap_kuhn_for_le_guin';
const toolCall = (name: string, args: unknown) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
/** Return the Kuhn loan, borrow The Left Hand of Darkness, then say so: the test's golden state on both servers. */
const SCRIPT = [
  toolCall('return_book', { loan_id: 'L0004' }),
  toolCall('checkout_book', { member_id: 'M03', book_id: 'B001', due_date: '2025-04-01' }),
  'Returned the Kuhn book and checked out The Left Hand of Darkness, due 2025-04-01. <DONE>',
];

interface Attempt {
  record?: EpisodeRecord;
  error?: unknown;
  saved: TurnCheckpoint[];
  sampled: number;
}

/**
 * One attempt on fresh server processes: replays `replay`, then dies once it has saved `dieAfter` turns. The policy
 * plays the script from the turn after the replayed ones (or from `scriptFrom`).
 */
async function attempt(options: {
  replay?: TurnCheckpoint[];
  dieAfter?: number;
  scriptFrom?: number;
}): Promise<Attempt> {
  const task = suite.tasks.find((t) => t.uid === UID) as ImportedTask;
  const from = options.scriptFrom ?? options.replay?.length ?? 0;
  const double = new OpenAIWireProtocolDouble((_b, i) => SCRIPT[Math.min(from + i, SCRIPT.length - 1)]!);
  doubles.push(double);
  const config = episodeConfigSchema.parse({
    policy: { base_url: await double.start(), model: 'policy-double', timeout_ms: 10_000 },
    user: { mode: 'scripted' },
    limits: { max_agent_turns: 6, wall_clock_ms: 120_000 },
  });
  const abandon = new AbortController();
  const deps = episodeDependencies(config, thinkingboxEnvironment(resources, suite, task), task, abandon.signal);
  const played: Attempt = { saved: [], sampled: 0 };
  deps.replay = options.replay;
  deps.saveTurn = async (checkpoint) => {
    played.saved.push(structuredClone(checkpoint));
    if (played.saved.length === options.dieAfter) abandon.abort(new Error('worker killed'));
  };
  try {
    played.record = await playEpisode(deps, task, `test:tb-resume:${UID}`, episodeRunOptions(config));
  } catch (err) {
    played.error = err;
  }
  played.sampled = double.requests.length;
  return played;
}

const resumeOptions = { attemptId: 'host:1:2:z', weightVersion: undefined, log: () => undefined };

test('killed after its first tool turn, the episode resumes on fresh servers with their state restored', async () => {
  const killed = await attempt({ dieAfter: 1 });
  assert.match(String(killed.error), /worker killed/);
  assert.deepEqual(
    killed.saved.map((t) => [t.turn, t.toolResults.map((r) => [r.name, r.isError])]),
    [[0, [['return_book', false]]]],
  );

  // Without the restore, the live checkout would land on a state where Kuhn is still lent: not the golden one.
  const fresh = await attempt({ scriptFrom: 1 });
  assert.equal(fresh.record?.outcome, 'agent_failure', 'a script that starts at the checkout misses the return');

  let forgotten = 0;
  const record = await playResumed(
    killed.saved,
    async (replay) => {
      const a = await attempt({ replay });
      if (a.error) throw a.error;
      assert.equal(a.sampled, 2, 'the return was replayed, not sampled; the checkout and the answer were live');
      return a.record!;
    },
    { ...resumeOptions, forget: async () => void (forgotten += 1) },
  );
  assert.equal(record.outcome, 'success', record.cause);
  assert.deepEqual(
    record.toolCalls.map((c) => c.name),
    ['return_book', 'checkout_book'],
  );
  assert.deepEqual(record.resume, [{ attempt: 'host:1:2:z', fromTurn: 1, savedTurns: 1, replayedToolCalls: 1 }]);
  assert.equal(forgotten, 0);
});

test('a recorded answer the fresh server does not give again: the episode starts over from its prompt', async () => {
  const killed = await attempt({ dieAfter: 1 });
  // As if the first process had answered otherwise (a server that is not deterministic).
  const recorded = killed.saved.map((t) => structuredClone(t));
  recorded[0]!.toolResults[0]!.text = recorded[0]!.toolResults[0]!.text.replace('L0004', 'L0009');
  assert.notDeepEqual(recorded, killed.saved, 'the recording names the loan it returned');
  const tries: number[] = [];
  const record = await playResumed(
    recorded,
    async (replay) => {
      tries.push(replay.length);
      const a = await attempt({ replay });
      if (a.error) throw a.error;
      return a.record!;
    },
    { ...resumeOptions, forget: async () => undefined },
  );
  assert.deepEqual(tries, [1, 0]);
  assert.equal(record.outcome, 'success', record.cause);
  assert.match(record.resume?.[0]?.restartedFromPrompt ?? '', /^replay diverged: turn 0: return_book returned .*L0004/);
  assert.equal(record.resume?.[0]?.fromTurn, 0);
});

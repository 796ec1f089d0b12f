import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EpisodeRecord } from '../rollout/episode-runner.ts';
import { findFinishedEpisode, markEpisodeRunning, saveEpisode } from '../rollout/episode-store.ts';
import { withClient } from '../infra/control-database.ts';
import { clearTurnCheckpoints, loadTurnCheckpoints, saveTurnCheckpoint } from '../rollout/turn-checkpoint-store.ts';
import type { TurnCheckpoint } from '../rollout/turn-checkpoints.ts';
import { controlReady } from './helpers/stack.ts';

const lone = '\uD83D'; // the first half of an emoji, cut off (a token boundary in a streamed output)

function recordWithOddText(): EpisodeRecord {
  const usage = { calls: 1, input: 1, output: 1, cached: 0 };
  return {
    outcome: 'agent_failure',
    reward: 0,
    finishReason: 'agent_turn_limit',
    cause: 'model said \u0000',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: `calls\u0000 a tool ${lone}` },
      { role: 'tool', content: 'low half alone: \uDE00', tool_call_id: 'c1' },
    ],
    completions: [],
    toolCalls: [{ turn: 1, name: 'sql', arguments: { ['key\u0000']: `v${lone}` }, result: 'r\u0000', isError: false }],
    usage: { policy: usage, user: usage, judge: usage },
    timings: { totalMs: 1, policyMs: 1, toolMs: 0, userMs: 0, gradeMs: 0, sandboxMs: 0 },
  } as EpisodeRecord;
}

test('finding 8: an episode with NUL and lone surrogates is saved (as U+FFFD), not lost', async () => {
  const url = await controlReady();
  const id = `test:finding-8:${Date.now()}`;
  await withClient(url, async (c) => {
    await markEpisodeRunning(
      c,
      { id, taskUid: 't', suite: 's', scenario: 'sc', domain: 'd', purpose: 'adhoc' },
      'attempt-1',
    );
    assert.equal(await saveEpisode(c, id, recordWithOddText(), 'attempt-1'), true);
    const stored = (
      await c.query<{ record: EpisodeRecord; cause: string }>('SELECT record, cause FROM episodes WHERE id = $1', [id])
    ).rows[0]!;
    assert.equal(stored.record.messages[1]!.content, 'calls\uFFFD a tool \uFFFD');
    assert.equal(stored.record.messages[2]!.content, 'low half alone: \uFFFD');
    assert.deepEqual(stored.record.toolCalls[0]!.arguments, { 'key\uFFFD': 'v\uFFFD' });
    assert.equal(stored.cause, 'model said \uFFFD');
    assert.equal(stored.record.unstorableCharacters, 7);
    assert.equal((await findFinishedEpisode(c, id))?.outcome, 'agent_failure');
    // An intact emoji (a valid surrogate pair) is kept as it is.
    const emoji = { ...recordWithOddText(), messages: [{ role: 'assistant', content: 'ok \uD83D\uDE00' }] };
    await markEpisodeRunning(
      c,
      { id: `${id}:emoji`, taskUid: 't', suite: 's', scenario: 'sc', domain: 'd', purpose: 'adhoc' },
      'a',
    );
    assert.equal(await saveEpisode(c, `${id}:emoji`, emoji as EpisodeRecord, 'a'), true);
    const kept = await c.query<{ content: string }>(
      `SELECT record->'messages'->0->>'content' AS content FROM episodes WHERE id = $1`,
      [`${id}:emoji`],
    );
    assert.equal(kept.rows[0]!.content, 'ok \uD83D\uDE00');
    await c.query(`DELETE FROM episodes WHERE id LIKE $1`, [`${id}%`]);
  });
});

test('saved turns: only the owning attempt saves them, in turn order, until they are cleared', async () => {
  const url = await controlReady();
  const id = `test:turns:${Date.now()}`;
  const meta = { id, taskUid: 't', suite: 's', scenario: 'sc', domain: 'd', purpose: 'adhoc' as const };
  const turn = (n: number, text: string) =>
    ({
      turn: n,
      elapsedMs: n * 10,
      generation: { raw: text, finishReason: 'stop', usage: { input: 1, output: 1, cached: 0 }, contextTokens: 2 },
      toolResults: [{ name: 'sql', text: `r\u0000${n}`, isError: false }],
    }) as TurnCheckpoint;
  await withClient(url, async (c) => {
    await markEpisodeRunning(c, meta, 'attempt-1');
    assert.equal(await saveTurnCheckpoint(c, id, 'attempt-1', turn(1, 'second')), true);
    assert.equal(await saveTurnCheckpoint(c, id, 'attempt-1', turn(0, 'first')), true);
    assert.equal(await saveTurnCheckpoint(c, id, 'attempt-0', turn(2, 'stale')), false, 'not the owner');
    const loaded = await loadTurnCheckpoints(c, id);
    assert.deepEqual(
      loaded.map((t) => [t.turn, t.generation.raw, t.toolResults[0]!.text]),
      [
        [0, 'first', 'r\uFFFD0'],
        [1, 'second', 'r\uFFFD1'],
      ],
      'in order, with what Postgres refuses replaced',
    );
    // A later attempt takes the episode over: it overwrites a turn, and the earlier attempt saves no more.
    await markEpisodeRunning(c, meta, 'attempt-2');
    assert.equal(await saveTurnCheckpoint(c, id, 'attempt-2', turn(1, 'second, again')), true);
    assert.equal(await saveTurnCheckpoint(c, id, 'attempt-1', turn(2, 'late')), false);
    assert.deepEqual(
      (await loadTurnCheckpoints(c, id)).map((t) => t.generation.raw),
      ['first', 'second, again'],
    );
    await clearTurnCheckpoints(c, id);
    assert.deepEqual(await loadTurnCheckpoints(c, id), []);
  });
});

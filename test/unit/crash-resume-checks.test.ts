import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  interruptionsAt,
  liveSavedTurn,
  resumeAfter,
  resumeChecks,
  resumeLine,
  sampledSegments,
  trajectoryMismatch,
  type DeadAttempts,
  type SavedTurnRow,
  type StoredEpisode,
} from '../../scripts/crash-resume-checks.ts';

/** The crash suite's resume scenario (scripts/crash-resume-checks.ts) on fabricated episode_turns rows. */

const A = 'c/step-1/tiny/inventory/add-kiwi#0';
const B = 'c/step-1/tiny/inventory/add-kiwi#1';
const row = (episodeId: string, turn: number, attempt: string, tokenIds: number[] | null = [10 + turn, 20 + turn]) =>
  ({ episodeId, turn, attempt, tokenIds }) satisfies SavedTurnRow;

/** A token trajectory: prompt (mask 0), then per turn its sampled tokens (mask 1) and an observation (mask 0). */
function trajectory(turns: number[][]): { tokenIds: number[]; lossMask: number[] } {
  const tokenIds = [1, 2, 3];
  const lossMask = [0, 0, 0];
  for (const t of turns) {
    tokenIds.push(...t, 90, 91);
    lossMask.push(...t.map(() => 1), 0, 0);
  }
  return { tokenIds, lossMask };
}

const stored = (id: string, resume: StoredEpisode['resume'], turns: number[][]): StoredEpisode => ({
  id,
  status: 'success',
  resume,
  trajectory: trajectory(turns),
});

test('a kill counts episodes by their latest saved turn; attempts it saw are dead and not counted again', () => {
  const dead: DeadAttempts = new Set();
  assert.equal(liveSavedTurn([], dead), false);
  const first = [row(A, 0, 'a1'), row(A, 1, 'a1'), row(B, 0, 'b1')];
  assert.equal(liveSavedTurn(first, dead), true);
  const found = interruptionsAt(1, first, dead);
  assert.deepEqual(
    found.map((i) => [i.episodeId, i.attempt, i.savedTurns, i.missingTurns.length]),
    [
      [A, 'a1', 2, 0],
      [B, 'b1', 1, 0],
    ],
  );
  assert.deepEqual(found[0]!.tokenIds, [
    [10, 20],
    [11, 21],
  ]);
  // Before the retries save anything new, the dead rows alone are no live saved turn and no new interruption.
  assert.equal(liveSavedTurn(first, dead), false);
  assert.deepEqual(interruptionsAt(2, first, dead), []);
  // A's retry (a2) restored its two turns and saved a third: a kill now interrupts a2 with 3 turns saved.
  const second = [...first, row(A, 2, 'a2')];
  assert.equal(liveSavedTurn(second, dead), true);
  const again = interruptionsAt(2, second, dead);
  assert.deepEqual(
    again.map((i) => [i.kill, i.episodeId, i.attempt, i.savedTurns]),
    [[2, A, 'a2', 3]],
  );
});

test('a hole in the saved turns is reported', () => {
  const [i] = interruptionsAt(1, [row(A, 0, 'a1'), row(A, 2, 'a1')], new Set());
  assert.equal(i!.savedTurns, 3);
  assert.deepEqual(i!.missingTurns, [1]);
  assert.equal(i!.tokenIds[1], null);
});

test('sampled segments are the runs of loss mask 1, one per generation', () => {
  assert.deepEqual(sampledSegments(trajectory([[5, 6], [7], [8, 9, 4]])), [[5, 6], [7], [8, 9, 4]]);
  assert.deepEqual(sampledSegments({ tokenIds: [1, 2], lossMask: [0, 0] }), []);
});

test('the resume entry is the one after the interrupted attempt', () => {
  const [i] = interruptionsAt(1, [row(A, 0, 'a2')], new Set());
  const entries = [
    { attempt: 'a2', fromTurn: 1, replayedToolCalls: 1 },
    { attempt: 'a3', fromTurn: 2, replayedToolCalls: 2 },
  ];
  assert.equal(resumeAfter(i!, entries)?.attempt, 'a3');
  assert.equal(resumeAfter({ ...i!, attempt: 'a1' }, entries)?.attempt, 'a2', 'a first attempt has no entry');
  assert.equal(resumeAfter(i!, entries.slice(0, 1)), undefined);
});

test('the trajectory must start with the turns saved at the kill, token by token', () => {
  const [i] = interruptionsAt(1, [row(A, 0, 'a1', [5, 6]), row(A, 1, 'a1', [7])], new Set());
  assert.equal(trajectoryMismatch(i!, stored(A, [], [[5, 6], [7], [8]])), undefined);
  assert.equal(trajectoryMismatch(i!, stored(A, [], [[5, 6, 7, 8]])), undefined, 'one stretch for turns cut short');
  assert.match(trajectoryMismatch(i!, stored(A, [], [[5, 6], [9], [8]]))!, /^sampled token 2: saved 7, stored 9/);
  assert.match(trajectoryMismatch(i!, stored(A, [], [[5, 6]]))!, /has 2 sampled tokens, the saved turns 3/);
  assert.equal(trajectoryMismatch(i!, undefined), 'no token trajectory stored');
  const [noTokens] = interruptionsAt(1, [row(A, 0, 'a1', null)], new Set());
  assert.match(trajectoryMismatch(noTokens!, stored(A, [], [[5]]))!, /no generation.sampled.tokenIds/);
  // A generation of no tokens leaves no segment: the next saved turn is compared with the next segment.
  const [empty] = interruptionsAt(1, [row(A, 0, 'a1', []), row(A, 1, 'a1', [7])], new Set());
  assert.equal(trajectoryMismatch(empty!, stored(A, [], [[7], [8]])), undefined);
});

test('resume checks: resumed, saved after the snapshot, started over, missing, and the summary line', () => {
  const dead: DeadAttempts = new Set();
  const interruptions = interruptionsAt(1, [row(A, 0, 'a1', [5]), row(A, 1, 'a1', [6]), row(B, 0, 'b1', [7])], dead);
  const good = new Map([
    [A, stored(A, [{ attempt: 'a2', fromTurn: 2, replayedToolCalls: 2 }], [[5], [6], [1]])],
    [B, stored(B, [{ attempt: 'b2', fromTurn: 2, replayedToolCalls: 1 }], [[7], [8]])],
  ]);
  const kills = [{ killed: ['rollout worker 12'] }, { killed: [] }];
  const ok = resumeChecks(kills, interruptions, good, 0);
  assert.deepEqual(
    ok.checks.map((c) => c.pass),
    [true, true, true, true],
    JSON.stringify(ok.checks),
  );
  assert.match(ok.checks[1]!.detail, /add-kiwi#1 \(kill 1, 1 saved\) -> 2 \(saved after the kill\)/);
  assert.deepEqual(ok.tally, {
    kills: 1,
    interrupted: 2,
    resumed: 2,
    restarted: 0,
    turnsSaved: 3,
    trajectoriesEqual: 2,
  });
  assert.equal(
    resumeLine(ok.tally, true),
    'crash-resume: kills=1 interrupted=2 resumed=2 restarted=0 turns_saved=3 trajectories_equal=2/2 ok',
  );

  const bad = new Map([
    [
      A,
      stored(
        A,
        [{ attempt: 'a2', fromTurn: 0, replayedToolCalls: 0, restartedFromPrompt: 'tool result differs' }],
        [[5], [9]],
      ),
    ],
    [B, { ...stored(B, [{ attempt: 'b2', fromTurn: 0, replayedToolCalls: 0 }], [[7]]), status: 'running' }],
  ]);
  const failed = resumeChecks(kills, interruptions, bad, 3);
  assert.deepEqual(
    failed.checks.map((c) => c.pass),
    [true, false, false, false],
  );
  assert.match(failed.checks[1]!.detail, /started over from the prompt \(tool result differs\)/);
  assert.match(failed.checks[1]!.detail, /stored running/);
  assert.match(failed.checks[1]!.detail, /resumed from turn 0/);
  assert.equal(failed.tally.restarted, 1);
  assert.equal(failed.tally.resumed, 0);
  assert.equal(failed.tally.trajectoriesEqual, 1);
  assert.match(resumeLine(failed.tally, false), / trajectories_equal=1\/2 FAIL$/);

  const none = resumeChecks([{ killed: [] }], [], new Map(), 0);
  assert.deepEqual(
    none.checks.map((c) => c.pass),
    [false, false, false, true],
    'a run whose kills interrupted nothing proves nothing',
  );
});

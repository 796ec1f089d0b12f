import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  groupVerdict,
  selectGroups,
  type DrawnGroup,
  type GroupSelection,
  type GroupSelectionKnobs,
} from '../../workflows/group-selection.ts';

/**
 * The training step's group selection (workflows/group-selection.ts) without Temporal: which tasks each round
 * draws, which groups train, the fallback once replacements run out, and the counts of the step record.
 */

type Kind = 'informative' | 'zero' | 'lost';

/** A group of 4 whose rewards (and losses) follow its kind; `infraErrors` and `stale` as given. */
function group(uid: string, kind: Kind, infraErrors = 0, stale = 0): DrawnGroup {
  const rewards = { informative: [1, 0, 1, 0], zero: [0, 0, 0, 0], lost: [1, 0] }[kind];
  return { uid, rewards, lost: kind === 'lost', infraErrors, stale };
}

const knobs = (overrides: Partial<GroupSelectionKnobs> = {}): GroupSelectionKnobs => ({
  groups_per_step: 2,
  max_replacements: 2,
  zero_variance_fallback: 'train_on_fewer',
  ...overrides,
});

/**
 * Drives the selection the way the step workflow does: draw the uids `next` names, run them (here: look up
 * their kind), repeat until `next` is empty. Returns the final selection and the uids of each round.
 */
function drive(kinds: Record<string, Kind>, k: GroupSelectionKnobs, earlierAttempts: DrawnGroup[] = []) {
  const order = Object.keys(kinds);
  const rounds: DrawnGroup[][] = [];
  for (;;) {
    const selection = selectGroups({ order, rounds, earlierAttempts }, k);
    if (selection.next.length === 0) return { selection, drawn: rounds.map((r) => r.map((g) => g.uid)) };
    rounds.push(selection.next.map((uid) => group(uid, kinds[uid]!)));
    assert.ok(rounds.length <= order.length + 1, 'the selection must come to an end');
  }
}

const uids = (groups: DrawnGroup[]) => groups.map((g) => g.uid);

test('verdict: a lost group is lost whatever its rewards; equal rewards are zero variance', () => {
  assert.equal(groupVerdict(group('a', 'informative')), 'informative');
  assert.equal(groupVerdict(group('a', 'zero')), 'zero_variance');
  assert.equal(groupVerdict({ ...group('a', 'zero'), lost: true }), 'lost');
  assert.equal(groupVerdict({ ...group('a', 'informative'), rewards: [0.5, 0.5, 0.25] }), 'informative');
  assert.equal(groupVerdict({ ...group('a', 'informative'), rewards: [0.5, 0.5, 0.5] }), 'zero_variance');
});

test('the first round draws groups_per_step tasks from the front of the order', () => {
  const selection = selectGroups({ order: ['a', 'b', 'c', 'd'], rounds: [] }, knobs({ groups_per_step: 3 }));
  assert.deepEqual(selection.next, ['a', 'b', 'c']);
  assert.equal(selection.replacements, 0);
  assert.deepEqual(selection.trained, []);
});

test('all informative: the first round is final, every group trains, no replacement, no fallback', () => {
  const { selection, drawn } = drive({ a: 'informative', b: 'informative', c: 'informative' }, knobs());
  assert.deepEqual(drawn, [['a', 'b']]);
  assert.deepEqual(uids(selection.trained), ['a', 'b']);
  assert.deepEqual(uids(selection.informative), ['a', 'b']);
  assert.equal(selection.replacements, 0);
  assert.equal(selection.fallback, null);
  assert.deepEqual(selection.next, []);
});

test('informative groups are kept; a zero-variance group is replaced by the next task and not trained', () => {
  const { selection, drawn } = drive({ a: 'informative', b: 'zero', c: 'informative', d: 'informative' }, knobs());
  assert.deepEqual(drawn, [['a', 'b'], ['c']]);
  assert.deepEqual(uids(selection.trained), ['a', 'c']);
  assert.deepEqual(uids(selection.zeroVariance), ['b']);
  assert.equal(selection.replacements, 1);
  assert.equal(selection.fallback, null);
});

test('replacements stop at max_replacements: a round draws no more than the budget left', () => {
  const kinds: Record<string, Kind> = { a: 'zero', b: 'zero', c: 'zero', d: 'zero', e: 'zero', f: 'informative' };
  const { selection, drawn } = drive(kinds, knobs({ groups_per_step: 3, max_replacements: 2 }));
  assert.deepEqual(drawn, [
    ['a', 'b', 'c'],
    ['d', 'e'],
  ]);
  assert.equal(selection.replacements, 2);
  assert.deepEqual(selection.next, [], 'no task past max_replacements is drawn');

  const spread = drive({ a: 'zero', b: 'informative', c: 'zero', d: 'zero', e: 'informative' }, knobs());
  assert.deepEqual(spread.drawn, [['a', 'b'], ['c'], ['d']], 'one replacement per missing group, round by round');
  assert.equal(spread.selection.replacements, 2);
});

test('max_replacements 0: only the first round is drawn', () => {
  const { selection, drawn } = drive({ a: 'zero', b: 'informative', c: 'informative' }, knobs({ max_replacements: 0 }));
  assert.deepEqual(drawn, [['a', 'b']]);
  assert.equal(selection.replacements, 0);
  assert.deepEqual(uids(selection.trained), ['b']);
});

test('replacements exhausted -> train_on_fewer trains on the informative groups only', () => {
  const kinds: Record<string, Kind> = { a: 'informative', b: 'zero', c: 'zero', d: 'informative' };
  const { selection, drawn } = drive(kinds, knobs({ max_replacements: 1, zero_variance_fallback: 'train_on_fewer' }));
  assert.deepEqual(drawn, [['a', 'b'], ['c']]);
  assert.equal(selection.fallback, 'train_on_fewer');
  assert.deepEqual(uids(selection.trained), ['a']);
  assert.deepEqual(uids(selection.zeroVariance), ['b', 'c']);
  assert.equal(selection.replacements, 1);
});

test('replacements exhausted -> keep_zero_variance fills up with zero-variance groups in draw order', () => {
  const kinds: Record<string, Kind> = { a: 'zero', b: 'informative', c: 'zero', d: 'zero', e: 'informative' };
  const k = knobs({ groups_per_step: 3, max_replacements: 1, zero_variance_fallback: 'keep_zero_variance' });
  const { selection, drawn } = drive(kinds, k);
  assert.deepEqual(drawn, [['a', 'b', 'c'], ['d']]);
  assert.equal(selection.fallback, 'keep_zero_variance');
  assert.deepEqual(uids(selection.trained), ['b', 'a', 'c'], 'informative first, then zero variance up to the count');
});

test('no informative group at all: the zero-variance groups train whatever the fallback', () => {
  for (const fallback of ['train_on_fewer', 'keep_zero_variance'] as const) {
    const { selection } = drive(
      { a: 'zero', b: 'zero', c: 'zero', d: 'zero' },
      knobs({ max_replacements: 1, zero_variance_fallback: fallback }),
    );
    assert.equal(selection.fallback, fallback);
    assert.deepEqual(uids(selection.trained), ['a', 'b'], fallback);
    assert.deepEqual(uids(selection.informative), []);
  }
});

test('infrastructure-lost groups are replaced and never trained, even under keep_zero_variance', () => {
  const kinds: Record<string, Kind> = { a: 'lost', b: 'informative', c: 'lost', d: 'zero' };
  const k = knobs({ max_replacements: 1, zero_variance_fallback: 'keep_zero_variance' });
  const { selection, drawn } = drive(kinds, k);
  assert.deepEqual(drawn, [['a', 'b'], ['c']]);
  assert.deepEqual(uids(selection.lost), ['a', 'c']);
  assert.deepEqual(uids(selection.trained), ['b']);
  assert.equal(selection.lostGroups, 2);
  assert.equal(selection.fallback, 'keep_zero_variance');

  const allLost = drive({ a: 'lost', b: 'lost' }, knobs({ max_replacements: 0 })).selection;
  assert.deepEqual(allLost.trained, [], 'nothing to train: the workflow retries the step');
  assert.equal(allLost.fallback, 'train_on_fewer');
});

test('counts: infrastructure errors and stale episodes of every group drawn, earlier attempts included', () => {
  const order = ['a', 'b', 'c'];
  const rounds = [[group('a', 'lost', 2, 1), group('b', 'informative', 1, 0)], [group('c', 'informative', 0, 3)]];
  const earlierAttempts = [group('a', 'lost', 4, 0), group('b', 'lost', 3, 2)];
  const selection = selectGroups({ order, rounds, earlierAttempts }, knobs());
  assert.equal(selection.lostGroups, 3);
  assert.equal(selection.infraErrors, 2 + 1 + 4 + 3);
  assert.equal(selection.staleEpisodes, 1 + 3 + 2);
  assert.equal(selection.replacements, 1, 'earlier attempts draw no replacements of this one');
  assert.deepEqual(uids(selection.trained), ['b', 'c']);
});

test('the order runs out: a short round, then final with what was found', () => {
  const { selection, drawn } = drive({ a: 'zero', b: 'informative', c: 'zero' }, knobs({ groups_per_step: 2 }));
  assert.deepEqual(drawn, [['a', 'b'], ['c']]);
  assert.equal(selection.fallback, 'train_on_fewer');
  assert.deepEqual(uids(selection.trained), ['b']);

  const empty = selectGroups({ order: [], rounds: [] }, knobs());
  assert.deepEqual(empty.next, []);
  assert.deepEqual(empty.trained, []);
  assert.equal(empty.fallback, 'train_on_fewer');
});

test('pure: the same draws give the same selection, and the inputs are left as they were', () => {
  const order = ['a', 'b', 'c'];
  const rounds = [[group('a', 'zero'), group('b', 'informative')]];
  const before = structuredClone(rounds);
  const first: GroupSelection<DrawnGroup> = selectGroups({ order, rounds }, knobs());
  assert.deepEqual(selectGroups({ order, rounds }, knobs()), first);
  assert.deepEqual(rounds, before);
  assert.deepEqual(order, ['a', 'b', 'c']);
  assert.deepEqual(first.next, ['c']);
});

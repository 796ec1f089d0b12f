import assert from 'node:assert/strict';
import { test } from 'node:test';
import { outcomeOf } from '../../core/report/episode-selection.ts';
import { leftOutNote, withoutTaskErrorTasks } from '../../core/task-error-pairing.ts';
import { resultLine } from '../../rollout/episode-result-line.ts';
import { selectGroups, type DrawnGroup } from '../../workflows/group-selection.ts';
import {
  addTaskErrors,
  countTaskError,
  taskErrorTasksKept,
  type ShardSummary,
} from '../../workflows/keyed-episode-types.ts';
import { episodeProgress } from '../../workflows/ui-text.ts';

/**
 * Where task errors (a task's own test code raising the same exception twice) are counted apart: the training
 * step's selection replaces the group and names the cause, shards and stages count keys and name tasks within a
 * cap, result lines mark them (a system error to the reference's tools), and the progress line shows them.
 */

const knobs = { groups_per_step: 2, max_replacements: 2, zero_variance_fallback: 'train_on_fewer' } as const;
const informative = (uid: string): DrawnGroup => ({ uid, rewards: [1, 0], lost: false, infraErrors: 0, stale: 0 });

test('a group with a task error is replaced, never trained, and the selection names its cause', () => {
  const raising: DrawnGroup = {
    uid: 'b',
    rewards: [],
    lost: true,
    infraErrors: 0,
    stale: 0,
    taskError: 'task error: the test of b raised IndexError at t.py:7 twice',
  };
  const order = ['a', 'b', 'c'];
  const first = selectGroups({ order, rounds: [[informative('a'), raising]] }, knobs);
  assert.deepEqual(first.next, ['c'], 'a replacement is drawn');
  const final = selectGroups({ order, rounds: [[informative('a'), raising], [informative('c')]] }, knobs);
  assert.deepEqual(
    final.trained.map((g) => g.uid),
    ['a', 'c'],
  );
  assert.deepEqual(final.taskErrors, [{ uid: 'b', cause: raising.taskError }]);
  assert.equal(selectGroups({ order, rounds: [[informative('a'), informative('c')]] }, knobs).taskErrors.length, 0);
});

test('shards count task-error keys and name each task once; the stage adds them within the cap', () => {
  const shard = (): ShardSummary => ({
    keys: 0,
    episodes: 0,
    reruns: 0,
    uncovered: 0,
    uncoveredSamples: [],
    peakInFlight: 0,
  });
  const a = shard();
  countTaskError(a, 't1', 'raised IndexError at t.py:7 twice');
  countTaskError(a, 't1', 'raised IndexError at t.py:7 twice');
  countTaskError(a, 't2', undefined);
  assert.equal(a.taskErrors, 3);
  assert.deepEqual(a.taskErrorTasks, [
    { uid: 't1', cause: 'raised IndexError at t.py:7 twice' },
    { uid: 't2', cause: 'task error' },
  ]);
  const b = shard();
  countTaskError(b, 't2', 'another cause');
  const stage = shard();
  addTaskErrors(stage, a);
  addTaskErrors(stage, b);
  addTaskErrors(stage, shard());
  assert.equal(stage.taskErrors, 4);
  assert.deepEqual(stage.taskErrorTasks, [
    { uid: 't1', cause: 'raised IndexError at t.py:7 twice' },
    { uid: 't2', cause: 'task error' },
  ]);
  const many = shard();
  for (let i = 0; i < taskErrorTasksKept + 50; i++) countTaskError(many, `t${i}`, 'x');
  assert.equal(many.taskErrors, taskErrorTasksKept + 50);
  assert.equal(many.taskErrorTasks!.length, taskErrorTasksKept);
});

test('a result line marks a task error apart from infrastructure errors, a system error to the reference', () => {
  const usage = { calls: 1, input: 10, output: 5, cached: 0 };
  const line = resultLine('e1', 't.py:test_x', 0, 'retail', {
    outcome: 'task_error',
    finishReason: 'done',
    cause: 'task error: raised IndexError at t.py:7 twice',
    usage: { policy: usage, user: usage, judge: usage },
  });
  assert.equal(line.task_error, true);
  assert.equal(line.infrastructure_error, false);
  assert.equal(line.success, false);
  assert.equal(line.is_system_error, true);
  assert.equal(line.test_result, null);
  assert.equal(outcomeOf(line), 'task error');
  assert.equal(outcomeOf({ success: false, infrastructure_error: false }), 'failed');
});

test('the progress line shows task errors', () => {
  const text = episodeProgress({ done: 10, keys: 20, inFlight: 2, reruns: 0, uncovered: 0, taskErrors: 3 });
  assert.match(text, /3 task errors \(their tests raise; not re-run\)/);
  assert.doesNotMatch(episodeProgress({ done: 1, keys: 2, inFlight: 1, reruns: 0, uncovered: 0 }), /task error/);
});

test('a paired comparison leaves out tasks with a task error on either side, and says so', () => {
  const task = (uid: string) => ({ uid, domain: 'd', n: 4, c: 2 });
  const before = { tasks: [task('a'), task('c')], task_errors: [{ uid: 'b' }] };
  const after = { tasks: [task('a'), task('b'), task('c')], task_errors: [] };
  const paired = withoutTaskErrorTasks(before, after);
  assert.deepEqual(
    [paired.a.map((t) => t.uid), paired.b.map((t) => t.uid), paired.leftOut],
    [['a', 'c'], ['a', 'c'], ['b']],
  );
  assert.match(leftOutNote(paired.leftOut), /^1 task with a task error on one side left out .*\(b\)$/);
  assert.deepEqual(withoutTaskErrorTasks({ tasks: [task('a')] }, { tasks: [task('a')] }).leftOut, []);
});

import { BadInputError } from '../core/errors.ts';
import type { AnySuite } from '../task-suites/task-suite-loader.ts';

/**
 * No held-out (benchmark) task may be a training candidate, checked when a campaign starts and in its dry run. The
 * uid is not enough: a test list entry that names a folder (`x/x_y.py:test_a`) imports the same test function as
 * `x_y.py:test_a` under another uid, which an exclusion list of the benchmark's uids would not catch.
 */

export interface BenchmarkLeak {
  candidate: string;
  heldOut: string;
  /** Where the candidate is written: an imported task's test file and function, a native task's file. */
  file: string;
}

type SuiteTask = AnySuite['tasks'][number];

/** What runs as the task: an imported task's test function, a native task its uid. */
function taskIdentity(task: SuiteTask): string {
  return 'test' in task ? `${task.test.file}::${task.test.function}` : `uid:${task.uid}`;
}

const taskSource = (task: SuiteTask) => ('test' in task ? `${task.test.file}::${task.test.function}` : task.file);

/** The training candidates that are a held-out task, under its uid or another. */
export function benchmarkLeaks(suite: AnySuite, candidates: string[], heldOut: Set<string>): BenchmarkLeak[] {
  const heldOutByIdentity = new Map<string, string>();
  for (const t of suite.tasks) if (heldOut.has(t.uid)) heldOutByIdentity.set(taskIdentity(t), t.uid);
  const byUid = new Map(suite.tasks.map((t) => [t.uid, t]));
  const leaks: BenchmarkLeak[] = [];
  for (const uid of candidates) {
    const task = byUid.get(uid);
    const held = heldOut.has(uid) ? uid : task && heldOutByIdentity.get(taskIdentity(task));
    if (held) leaks.push({ candidate: uid, heldOut: held, file: task ? taskSource(task) : '(not in the suite)' });
  }
  return leaks;
}

/** Refuses leaks, naming each candidate, the held-out uid it is and its file, and where the held-out set comes from. */
export function refuseBenchmarkLeaks(
  leaks: BenchmarkLeak[],
  where: { suiteDir: string; excludeUidsFile?: string },
): void {
  if (!leaks.length) return;
  const named = leaks
    .slice(0, 10)
    .map((l) => (l.candidate === l.heldOut ? l.candidate : `${l.candidate} (is ${l.heldOut})`) + ` in ${l.file}`);
  const heldBy = [
    ...(where.excludeUidsFile ? [where.excludeUidsFile] : []),
    "the suite's evaluation-only tasks (tbt tasks import-thinkingbox --exclude-uids)",
  ].join(' and ');
  throw new BadInputError(
    `${leaks.length} training candidate(s) of suite ${where.suiteDir} are held-out evaluation tasks (held out by ` +
      `${heldBy}), which must never be trained on: ${named.join('; ')}${leaks.length > 10 ? '; ...' : ''}. ` +
      'Remove them from the training list and import again',
  );
}

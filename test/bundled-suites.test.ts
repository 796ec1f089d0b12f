import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { loadSuites } from '../task-suites/task-suite-loader.ts';
import { repoRoot } from '../config/environment.ts';

const run = promisify(execFile);

test(
  'bundled suites: at least 3 business domains with 60 tasks incl. no-change tasks, and a tiny suite of 24+ small ' +
    'tasks',
  () => {
    const { suites, problems } = loadSuites(path.join(repoRoot, 'tasks'));
    assert.deepEqual(problems, []);
    const business = suites.find((s) => s.name === 'business')!;
    const tiny = suites.find((s) => s.name === 'tiny')!;
    assert.ok(new Set(Object.values(business.scenarios).map((s) => s.domain ?? s.name)).size >= 3);
    assert.ok(business.tasks.length >= 60, `business has ${business.tasks.length} tasks`);
    assert.ok(tiny.tasks.length >= 24, `tiny has ${tiny.tasks.length} tasks`);
    for (const scenario of Object.values(tiny.scenarios))
      assert.ok(scenario.tools.length <= 4, `tiny scenario ${scenario.name} has ${scenario.tools.length} tools`);
    for (const task of tiny.tasks)
      assert.ok(task.golden.length <= 2, `tiny task ${task.uid} needs ${task.golden.length} calls`);
  },
);

test('tbt tasks validate tasks/: every golden replay passes, null agents and one-row mutations fail', async () => {
  const { stdout } = await run(
    path.join(repoRoot, 'node_modules', '.bin', 'tsx'),
    [path.join(repoRoot, 'cli', 'tbt.ts'), 'tasks', 'validate', path.join(repoRoot, 'tasks')],
    { timeout: 600_000, maxBuffer: 16 << 20 },
  );
  const last = stdout.trim().split('\n').at(-1)!;
  const m = /^tasks=(\d+) domains=(\d+) golden_pass=(\d+) null_fail=(\d+) mutation_fail=(\d+)$/.exec(last);
  assert.ok(m, `last line: ${last}`);
  const [tasks, domains, golden, nullFail, mutation] = m.slice(1).map(Number) as [
    number,
    number,
    number,
    number,
    number,
  ];
  const noChange = Number(/no_change_tasks=(\d+)/.exec(stdout)?.[1]);
  assert.ok(tasks >= 84 && domains >= 4);
  assert.equal(golden, tasks);
  assert.equal(mutation, tasks);
  assert.equal(nullFail, tasks - noChange);
  assert.ok(noChange >= 5, `no-change tasks: ${noChange}`);
});

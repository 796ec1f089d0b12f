import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import {
  learningVerdict,
  parseLearningResults,
  taskResults,
  type LearningResults,
} from '../../bench/learning/learning-results.ts';
import { repoRoot } from '../../config/environment.ts';
import type { TaskOutcome } from '../../core/metrics.ts';

/** bench:learning's recorded results and `--recompute`: the line of a run, from its file, without training. */

const field = (line: string, name: string) => line.match(new RegExp(` ${name}=(\\S+)`))?.[1];

// Three families of four tasks, 3 attempts: one family learns everything, one nothing, one loses a little.
const before: TaskOutcome[] = ['set', 'add', 'lend'].flatMap((f, k) =>
  [0, 1, 2, 3].map((i) => ({ uid: `s/${f}-${i}`, domain: 's', n: 3, c: k === 2 ? 2 : 0 })),
);
const after = before.map((t) => ({ ...t, c: t.uid.startsWith('s/set') ? 3 : t.uid.startsWith('s/lend') ? 1 : 0 }));
const run = { campaign: 'bench-learning-s1', split: 'instances' as const, seed: 1, attempts: 3, minutes: 30.04 };

test('a per-task record gives the full line: both intervals, the split and the families', () => {
  const results = taskResults(run, before, after);
  const line = learningVerdict(results);
  assert.match(line, /^learning: pass@1 before=0\.222 after=0\.444 delta=\+0\.222 ci95=\[/);
  assert.match(line, / families=3 split=instances tasks=12 attempts=3 minutes=30\.0$/);
  const [lo, hi] = field(line, 'ci95')!.slice(1, -1).split(',').map(Number);
  const [flo, fhi] = field(line, 'ci95_family')!.slice(1, -1).split(',').map(Number);
  assert.ok(
    flo! < lo! && fhi! > hi!,
    `families move as blocks: ${field(line, 'ci95_family')} vs ${field(line, 'ci95')}`,
  );
});

test('a written record reads back to the same line, and extra per-task fields are not kept', () => {
  const withCost = before.map((t) => ({ ...t, cost: 0.01 }));
  const results = taskResults(run, withCost, after);
  const text = JSON.stringify(results);
  assert.ok(!text.includes('cost'));
  assert.equal(learningVerdict(parseLearningResults('r.json', text)), learningVerdict(results));
});

test('family totals give the same family interval as the per-task record they sum', () => {
  const families: LearningResults = {
    granularity: 'family',
    ...run,
    families: ['set', 'add', 'lend'].map((f) => ({
      family: `s/${f}`,
      tasks: 4,
      before: before.filter((t) => t.uid.startsWith(`s/${f}-`)).reduce((s, t) => s + t.c, 0),
      after: after.filter((t) => t.uid.startsWith(`s/${f}-`)).reduce((s, t) => s + t.c, 0),
    })),
  };
  const fromTotals = learningVerdict(families);
  const fromTasks = learningVerdict(taskResults(run, before, after));
  assert.equal(field(fromTotals, 'ci95'), 'n/a');
  for (const name of ['before', 'after', 'delta', 'ci95_family', 'families', 'tasks'])
    assert.equal(field(fromTotals, name), field(fromTasks, name), name);
});

test("the recorded seed-1 run: the docs' line, with its family interval above zero", () => {
  const file = path.join(repoRoot, 'bench', 'learning', 'recorded', 'instances-seed1-families.json');
  const line = learningVerdict(parseLearningResults(file, fs.readFileSync(file, 'utf8')), file);
  // docs/learning-benchmark.md, Status: before=0.333 after=0.635 delta=+0.301 ... tasks=52 attempts=3 minutes=42.2
  assert.match(line, /^learning: pass@1 before=0\.333 after=0\.635 delta=\+0\.301 ci95=n\/a ci95_family=\[/);
  assert.match(line, / families=13 split=instances tasks=52 attempts=3 minutes=42\.2$/);
  const [lo, hi] = field(line, 'ci95_family')!.slice(1, -1).split(',').map(Number);
  // Wider than the task-level [+0.179,+0.429] the run printed, on both sides.
  assert.ok(lo! > 0 && lo! < 0.179 && hi! > 0.429, line);
});

test('bad records name the file and the field', () => {
  assert.throws(() => parseLearningResults('r.json', '{'), /^BadInputError: r\.json: invalid JSON/);
  assert.throws(
    () => parseLearningResults('r.json', JSON.stringify({ ...taskResults(run, before, after), split: 'tasks' })),
    /r\.json: field split: /,
  );
  const tooMany: LearningResults = {
    granularity: 'family',
    ...run,
    families: [
      { family: 'a', tasks: 2, before: 7, after: 0 },
      { family: 'b', tasks: 2, before: 0, after: 0 },
    ],
  };
  assert.throws(() => learningVerdict(tooMany, 'r.json'), /r\.json: field families\.0: a has 7 \/ 0 successes/);
  const twice = { ...tooMany, families: [tooMany.families[1]!, tooMany.families[1]!] };
  assert.throws(() => learningVerdict(twice, 'r.json'), /field families\.1: b appears twice/);
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { writeTemplateSplit } from '../../bench/learning/template-split.ts';
import { repoRoot } from '../../config/environment.ts';
import { checkFamiliesDisjoint, familySplit } from '../../core/family-split.ts';
import { taskFamily } from '../../core/seeded-choice.ts';
import { loadSuite } from '../../task-suites/task-suite-loader.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** bench:learning --split templates: whole families held out, chosen by seed, about half the tasks. */

const suiteDir = path.join(repoRoot, 'tasks', 'tiny-learning');
const tasks = loadSuite(suiteDir).suite.tasks;
const uids = tasks.map((t) => t.uid);
const dir = testTempDir('tbt-family-split-');

test("the learning suite's families: taskFamily of a uid is the family its generator tagged", () => {
  const tagged = new Map<string, Set<string>>();
  for (const t of tasks) {
    const tags = t.tags.filter((tag) => tag.startsWith('family:'));
    assert.equal(tags.length, 1, `${t.uid}: one family tag`);
    tagged.set(taskFamily(t.uid), (tagged.get(taskFamily(t.uid)) ?? new Set()).add(tags[0]!));
  }
  assert.equal(tagged.size, 13);
  for (const [family, tags] of tagged) assert.equal(tags.size, 1, `${family}: tasks of one tag only`);
  assert.equal(new Set([...tagged.values()].map((s) => [...s][0])).size, 13, 'no tag spans two uid families');
});

test('a template split holds out whole families, about half the tasks, on both seeds', () => {
  for (const seed of [1, 2]) {
    const s = familySplit(uids, seed);
    assert.deepEqual([...s.training, ...s.heldOut].sort(), [...uids].sort());
    checkFamiliesDisjoint(s.training, s.heldOut);
    assert.deepEqual(s.heldOutFamilies, [...new Set(s.heldOut.map(taskFamily))].sort());
    assert.deepEqual(s.trainingFamilies, [...new Set(s.training.map(taskFamily))].sort());
    // Families of 8: the held-out count is within half a family of half the suite (104 tasks).
    assert.ok(Math.abs(s.heldOut.length - uids.length / 2) <= 4, `seed ${seed}: ${s.heldOut.length} held out`);
  }
});

test('a template split depends on the seed, never on the input order', () => {
  const heldOut = [1, 2, 3, 4, 5].map((seed) => familySplit(uids, seed).heldOutFamilies.join(','));
  assert.ok(new Set(heldOut).size > 1, `five seeds, one held-out set: ${heldOut[0]}`);
  assert.deepEqual(familySplit([...uids].reverse(), 3), familySplit(uids, 3));
});

test('uneven families: the split still lands near half and leaves both sides non-empty', () => {
  const uneven = [...Array.from({ length: 9 }, (_, i) => `big-${i}`), 'a-1', 'b-1', 'c-1', 'c-2'];
  for (const seed of [1, 2, 3, 4]) {
    const s = familySplit(uneven, seed);
    assert.ok(s.training.length > 0 && s.heldOut.length > 0);
    checkFamiliesDisjoint(s.training, s.heldOut);
  }
  assert.throws(() => familySplit(['x-1', 'x-2'], 1), /at least two task families, got 1/);
});

test('the instance split fails the family check: every held-out family is trained on', () => {
  const heldOut = parse(fs.readFileSync(path.join(repoRoot, 'bench', 'learning', 'held-out.yaml'), 'utf8')) as string[];
  const training = uids.filter((u) => !heldOut.includes(u));
  assert.throws(
    () => checkFamiliesDisjoint(training, heldOut),
    (err: Error) => {
      assert.match(err.message, /^13 held-out families are also in training: /);
      assert.match(
        err.message,
        /tiny-learning\/\w+\/\w+ \(training task tiny-learning\/\w+\/\w+-0\), .*\(13 in all\)$/,
      );
      return true;
    },
  );
});

test('writeTemplateSplit writes the held-out list the campaign reads, and checks it', () => {
  const file = path.join(dir, 'held-out.yaml');
  const s = writeTemplateSplit(suiteDir, 2, file);
  assert.deepEqual(parse(fs.readFileSync(file, 'utf8')), s.heldOut);
  assert.deepEqual(s, familySplit(uids, 2));
});

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { createCampaignActivities } from '../../activities/campaign-activities.ts';
import { writeTemplateSplit } from '../../bench/learning/template-split.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { pairedComparison } from '../../core/metrics.ts';
import { checkFamiliesDisjoint } from '../../core/family-split.ts';
import { learningLine } from '../../core/report/learning-line.ts';
import { taskFamily } from '../../core/seeded-choice.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** The learning benchmark's held-out split: training candidates and evaluated tasks never overlap. */

const suiteDir = path.join(repoRoot, 'tasks', 'tiny-learning');
const heldOutFile = path.join(repoRoot, 'bench', 'learning', 'held-out.yaml');
// ingestCandidates reads only the suite and writes candidates.yaml; it never connects to the database.
const stateDir = testTempDir('tbt-held-out-');
const activities = createCampaignActivities({ controlUrl: 'postgres://unused', stateDir });
const writeList = (uids: string[]) => {
  const file = path.join(stateDir, `list-${Math.random().toString(36).slice(2)}.yaml`);
  fs.writeFileSync(file, uids.map((u) => `- ${u}`).join('\n') + '\n');
  return file;
};

test('the benchmark config evaluates held-out tasks only', () => {
  const config = loadCampaignConfig(path.join(repoRoot, 'bench', 'learning', 'config.yaml'));
  assert.equal(config.evaluation.tasks, 'held_out');
  assert.equal(config.exclude_uids, 'held-out.yaml');
});

test('held_out: candidates and held-out tasks are disjoint and together the whole suite', async () => {
  const heldOut = parse(fs.readFileSync(heldOutFile, 'utf8')) as string[];
  const r = await activities.ingestCandidates({
    campaignId: 'held-out-split',
    suiteDir,
    excludeUidsFile: heldOutFile,
    evaluationTasks: 'held_out',
  });
  assert.deepEqual(r.heldOutUids, [...heldOut].sort());
  assert.equal(r.uids.filter((u) => r.heldOutUids.includes(u)).length, 0, 'no held-out task is a candidate');
  assert.equal(r.uids.length + r.heldOutUids.length, r.evaluationUids.length);
  assert.ok(r.heldOutUids.length >= 40, `${r.heldOutUids.length} held-out tasks`);
  // Every family is on both sides: held-out tasks are new instances of trained families.
  const family = (u: string) => u.replace(/-\d+$/, '');
  assert.deepEqual([...new Set(r.uids.map(family))].sort(), [...new Set(r.heldOutUids.map(family))].sort());
});

test('templates split: the campaign pool holds no task of a held-out family', async () => {
  const file = path.join(stateDir, 'templates-held-out.yaml');
  const split = writeTemplateSplit(suiteDir, 1, file);
  const r = await activities.ingestCandidates({
    campaignId: 'held-out-templates',
    suiteDir,
    excludeUidsFile: file,
    evaluationTasks: 'held_out',
  });
  assert.deepEqual(r.heldOutUids, [...split.heldOut].sort());
  assert.deepEqual([...new Set(r.uids.map(taskFamily))].sort(), split.trainingFamilies);
  checkFamiliesDisjoint(r.uids, r.heldOutUids);
});

test('held_out with a uid the suite lacks names the file and the uid', async () => {
  const file = writeList(['tiny-learning/todo/complete-1', 'tiny-learning/todo/no-such-task']);
  await assert.rejects(
    activities.ingestCandidates({
      campaignId: 'held-out-unknown',
      suiteDir,
      excludeUidsFile: file,
      evaluationTasks: 'held_out',
    }),
    (err: Error) => {
      assert.match(err.message, /list-.*\.yaml: 1 held-out uid\(s\) not in suite .*tiny-learning.*no-such-task/);
      return true;
    },
  );
  // Outside held_out an unknown exclusion stays harmless (it excludes nothing).
  const r = await activities.ingestCandidates({ campaignId: 'held-out-unknown-pool', suiteDir, excludeUidsFile: file });
  assert.equal(r.heldOutUids.length, 1);
});

test('held_out without any held-out task says how to hold tasks out', async () => {
  await assert.rejects(
    activities.ingestCandidates({ campaignId: 'held-out-none', suiteDir, evaluationTasks: 'held_out' }),
    /evaluation\.tasks is held_out but suite .* holds no task out of training: set exclude_uids/,
  );
});

test('the learning line has the fixed shape and signs', () => {
  const a = [0, 1, 2, 3].map((i) => ({ uid: `t${i}`, domain: 'd', n: 2, c: i % 2 }));
  const b = a.map((t) => ({ ...t, c: 2 }));
  const paired = pairedComparison(a, b, { resamples: 200, seed: 1 });
  const line = learningLine(paired, { families: 3, interval: [-0.0612, 1] }, 'templates', 2, 12.34);
  assert.match(
    line,
    new RegExp(
      String.raw`^learning: pass@1 before=0\.250 after=1\.000 delta=\+0\.750 ci95=\[\+0\.\d{3},\+1\.000\] ` +
        String.raw`ci95_family=\[-0\.061,\+1\.000\] families=3 split=templates ` +
        String.raw`tasks=4 attempts=2 minutes=12\.3$`,
    ),
  );
  // A parser of the older line (fields up to ci95, then tasks= and on) still finds every field it knew.
  for (const field of ['before', 'after', 'delta', 'ci95', 'tasks', 'attempts', 'minutes'])
    assert.match(line, new RegExp(` ${field}=\\S+`), field);
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse, stringify } from 'yaml';
import { importThinkingbox } from '../../cli/commands/tasks.ts';
import { benchmarkLeaks } from '../../campaign-records/benchmark-leak.ts';
import { selectCandidates } from '../../campaign-records/training-candidates.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { loadImportedSuite } from '../../datasets/thinkingbox/imported-suite.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The seeds' experiment (config/reference-bench.yaml): it validates, trains and evaluates at the reference's sizes,
 * the compose policy server holds its longest episode, and no held-out (bench) task can be a training candidate,
 * not even under another uid, at start or in the dry run. The dry run runs on our fixture dataset, and on the
 * public bench when it is on this machine.
 */

const configFile = path.join(repoRoot, 'config', 'reference-bench.yaml');
const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const fixtureList = path.join(fixture, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml');
// The reference's prompt cap: its serving context is this plus the episode budget (26,624 + 106,496 = 133,120).
const REFERENCE_PROMPT_TOKENS = 26_624;
const work = testTempDir('tbt-reference-bench-');

const listed = (file: string) => parse(fs.readFileSync(file, 'utf8')) as string[];
const writeList = (name: string, uids: string[]) => {
  const file = path.join(work, `${name}.yaml`);
  fs.writeFileSync(file, uids.map((u) => `- ${u}\n`).join(''));
  return file;
};

/** The dataset imported with `held` marked evaluation-only, as the config's header says to import the bench. */
function importSuite(name: string, data: string, uids: string[], held: string): string {
  const out = path.join(work, name);
  const errors: string[] = [];
  const code = importThinkingbox(
    ['--data', data, '--list', writeList(`${name}-list`, uids), '--exclude-uids', held, '--out', out],
    { out: () => {}, err: (l) => errors.push(l) },
  );
  assert.equal(code, 0, errors.join('\n'));
  return out;
}

/** `tbt train --dry-run` of the shipped config with its suite and bench list pointed elsewhere. */
function dryRun(suite: string, excludeUids: string) {
  const config = parse(fs.readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  const file = path.join(work, `reference-bench-${path.basename(suite)}.yaml`);
  const prices = path.join(repoRoot, 'config', config.prices as string);
  fs.writeFileSync(file, stringify({ ...config, suite, exclude_uids: excludeUids, prices }));
  return spawnSync(path.join(repoRoot, 'bin', 'tbt'), ['train', '--config', file, '--dry-run'], {
    encoding: 'utf8',
    cwd: repoRoot,
    // The learner's memory model is config/reference-q38.yaml's (test/unit/reference-config.test.ts): same learner.
    env: { ...process.env, TBT_STATE_DIR: path.join(work, 'state'), TBT_MEMORY_CHECK: 'off' },
  });
}

test('the reference-bench config: 50 steps of 18 x 8, reference bands, bench 507 x 20 before and after', () => {
  const c = loadCampaignConfig(configFile);
  assert.deepEqual([c.training.steps, c.training.groups_per_step, c.training.group_size], [50, 18, 8]);
  assert.deepEqual([c.probe.enabled, c.probe.repeats, c.probe.min_clean_runs], [true, 8, 3]);
  assert.deepEqual(c.probe.retain_bands, ['hard', 'medium', 'easy']);
  assert.deepEqual([c.evaluation.tasks, c.evaluation.repeats, c.evaluation.before_training], ['held_out', 20, true]);
  assert.match(c.exclude_uids!, /releases\/thinkingbox_bench_v1\/testlist_thinkingbox_bench_v1\.yaml$/);
  assert.equal(c.episode.limits.episode_token_budget, 106_496);
  assert.deepEqual([c.learner.lr, c.learner.weight_decay, c.learner.nodes, c.learner.gpus_per_node], [1e-6, 0, 3, 8]);
});

test("the compose policy server's context holds the reference's prompt plus the episode budget", () => {
  const compose = parse(fs.readFileSync(path.join(repoRoot, 'docker', 'compose.yaml'), 'utf8')) as {
    services: Record<string, { command: string[] }>;
  };
  const command = compose.services['policy-server']!.command;
  const value = command[command.indexOf('--max-model-len') + 1]!;
  const context = Number(/^\$\{TBT_POLICY_MAX_MODEL_LEN:-(\d+)\}$/.exec(value)?.[1]);
  const budget = loadCampaignConfig(configFile).episode.limits.episode_token_budget;
  assert.ok(context >= REFERENCE_PROMPT_TOKENS + budget, `--max-model-len ${value} < 26,624 + ${budget}`);
});

test('a held-out task among the training candidates is refused, under its own uid or another', () => {
  const held = writeList('held', ['stacks_shelving.py:test_move_silent_spring']);
  const alias = 'stacks/stacks_shelving.py:test_move_silent_spring';
  const suiteDir = importSuite('leaky', path.join(fixture, 'dataset'), [...listed(fixtureList), alias], held);
  assert.throws(
    () => selectCandidates({ campaignId: 'leak', suiteDir, excludeUidsFile: held, evaluationTasks: 'held_out' }),
    (err: Error) => {
      assert.match(err.message, /1 training candidate\(s\) of suite .*leaky are held-out evaluation tasks/);
      assert.match(err.message, /stacks\/stacks_shelving\.py:test_move_silent_spring \(is stacks_shelving\.py:/);
      assert.match(err.message, /in \S+stacks\/stacks_shelving\.py::test_move_silent_spring/);
      assert.match(err.message, /held out by \S+held\.yaml and the suite's evaluation-only tasks/);
      return true;
    },
  );
  // The same uid can only leak if the selection itself went wrong: the check still names it.
  const { suite } = loadImportedSuite(suiteDir);
  const uid = 'circulation.py:test_opening_hours';
  const leaks = benchmarkLeaks(suite!, [uid], new Set([uid]));
  assert.deepEqual(
    leaks.map((l) => [l.candidate, l.heldOut]),
    [[uid, uid]],
  );
});

test('dry run on the fixture: held-out tasks x 20, none in a training pool; a leak fails it, naming the uid', () => {
  const uids = listed(fixtureList);
  const held = writeList('fixture-bench', uids.slice(0, 3));
  const clean = dryRun(importSuite('clean', path.join(fixture, 'dataset'), uids, held), held);
  assert.equal(clean.status, 0, clean.stderr);
  assert.match(clean.stdout, /evaluation +held-out tasks only \(uids in \S+fixture-bench\.yaml and the suite's /);
  assert.match(
    clean.stdout,
    /evaluation-only tasks\): 3 tasks x 20 repeats before and after training, 0 of them in any training pool \(9 /,
  );
  const alias = 'stacks/stacks_shelving.py:test_move_silent_spring';
  const leakHeld = writeList('fixture-bench-leak', [...uids.slice(0, 3), 'stacks_shelving.py:test_move_silent_spring']);
  const leaky = dryRun(importSuite('leaky-dry', path.join(fixture, 'dataset'), [...uids, alias], leakHeld), leakHeld);
  assert.notEqual(leaky.status, 0);
  assert.match(leaky.stderr, /training candidate\(s\) of suite .* are held-out evaluation tasks/);
  assert.match(leaky.stderr, /stacks\/stacks_shelving\.py:test_move_silent_spring/);
});

const dataCandidates = [
  process.env.TBT_THINKINGBOX_DATA,
  path.join(repoRoot, '..', 'shared', 'datasets', 'thinkingbox-data'),
  path.join(repoRoot, '..', '..', 'shared', 'datasets', 'thinkingbox-data'),
].filter((p): p is string => !!p);
const data = dataCandidates.find((p) => fs.existsSync(path.join(p, 'releases', 'thinkingbox_bench_v1')));

test(
  'dry run with the public bench imported: 507 x 20 evaluation tasks, 0 of them in any training pool',
  { skip: data ? false : `the public ThinkingBox data is not here (looked in ${dataCandidates.join(', ')})` },
  () => {
    const bench = path.join(data!, 'releases', 'thinkingbox_bench_v1', 'testlist_thinkingbox_bench_v1.yaml');
    const candidates = listed(path.join(repoRoot, 'config', 'reference-bench-candidates.yaml'));
    const suite = importSuite('reference-bench', path.join(data!, 'dataset'), [...candidates, ...listed(bench)], bench);
    const run = dryRun(suite, bench);
    assert.equal(run.status, 0, run.stderr);
    assert.match(
      run.stdout,
      new RegExp(
        String.raw`: 507 tasks x 20 repeats before and after training, 0 of them in any training pool ` +
          String.raw`\(${candidates.length} training candidates;`,
      ),
    );
  },
);

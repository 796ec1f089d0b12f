import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { learnerYamlField, resolveLearnerSection } from '../../learner-control/learner-config.ts';
import { learnerHyperparameters, learnerSchema } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError } from '../../core/errors.ts';

// The learner's dataclasses own every hyperparameter's default and bounds; the campaign YAML only names them.

test('the learner fills in its own defaults for fields the YAML leaves unset', () => {
  const resolved = resolveLearnerSection(learnerSchema.parse({ lr: 3e-5 }), 7);
  assert.equal(resolved.lr, 3e-5);
  assert.equal(resolved.eps_low, 0.2);
  assert.deepEqual(resolved.betas, [0.9, 0.999]);
  assert.equal(resolved.weight_decay, 0);
  assert.equal(resolved.keep_checkpoints, 3);
});

test('every hyperparameter of the YAML names a field of the learner config', () => {
  // The learner prints every dataclass field resolved; a [section, field] it does not have comes back undefined.
  const resolved: Record<string, unknown> = resolveLearnerSection(learnerSchema.parse({}), 1);
  for (const [yamlField, { learnerField }] of Object.entries(learnerHyperparameters)) {
    assert.notEqual(resolved[yamlField], undefined, `learner.${yamlField}: no field ${learnerField.join('.')}`);
  }
});

test('a value only the learner rejects is bad input naming the YAML field', () => {
  assert.throws(
    () => resolveLearnerSection(learnerSchema.parse({ eps_low: 1.5 }), 1),
    (err: unknown) => {
      assert.ok(err instanceof BadInputError);
      assert.equal(err.message, 'learner.eps_low: must be in (0, 1)');
      return true;
    },
  );
  assert.throws(() => resolveLearnerSection(learnerSchema.parse({ betas: [0.9, 1] }), 1), /learner\.betas\[1\]:/);
  assert.equal(learnerYamlField('checkpoint.keep_last'), 'learner.keep_checkpoints');
});

test('learner.lora: the learner fills in alpha and targets, and refuses a target the model lacks by its field', () => {
  const resolved = resolveLearnerSection(learnerSchema.parse({ lora: { rank: 8 } }), 1);
  assert.deepEqual(resolved.lora, {
    rank: 8,
    alpha: 32,
    targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
  });
  assert.equal(resolveLearnerSection(learnerSchema.parse({}), 1).lora, undefined, 'unset stays full fine-tuning');
  assert.throws(
    () => resolveLearnerSection(learnerSchema.parse({ lora: { rank: 8, targets: ['qkv_proj'] } }), 1),
    (err: unknown) => {
      assert.ok(err instanceof BadInputError);
      assert.match(err.message, /^learner\.lora\.targets: no Linear module is named any of \['qkv_proj'\] .*'q_proj'/);
      return true;
    },
  );
});

test('tbt train --dry-run refuses a learner value outside its bounds, naming file and field', () => {
  const config = path.join(repoRoot, 'config', `learner-bounds-${process.pid}.yaml`);
  const local = fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8');
  fs.writeFileSync(config, local.replace(/^learner:\n/m, 'learner:\n  eps_low: 1.5\n'));
  try {
    const run = spawnSync(path.join(repoRoot, 'bin', 'tbt'), ['train', '--config', config, '--dry-run'], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.notEqual(run.status, 0, run.stdout);
    assert.match(run.stderr, /learner-bounds-\d+\.yaml: field learner\.eps_low: must be in \(0, 1\)/);
    assert.doesNotMatch(run.stdout, /hyperparameters/, 'nothing of the plan is printed before the check');
  } finally {
    fs.rmSync(config, { force: true });
  }
});

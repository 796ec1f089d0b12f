import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse, stringify } from 'yaml';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** A bound or shard size below 1 is a config error naming the field (and its line). */
function withField(section: string, field: string, value: unknown): string {
  const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
  doc[section] = { ...doc[section], [field]: value };
  const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
  fs.writeFileSync(file, stringify(doc));
  return file;
}

for (const [section, field] of [
  ['probe', 'concurrency'],
  ['probe', 'shard_size'],
  ['training', 'concurrency'],
  ['evaluation', 'concurrency'],
  ['evaluation', 'shard_size'],
]) {
  test(`${section}.${field} = 0 is rejected naming the field`, () => {
    assert.throws(
      () => loadCampaignConfig(withField(section!, field!, 0)),
      (err: Error) => {
        assert.match(err.message, new RegExp(`campaign\\.yaml:\\d+: ${section}\\.${field}: `));
        return true;
      },
    );
  });
}

test('shard sizes default to 500 keys', () => {
  const config = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
  assert.equal(config.probe.shard_size, 500);
  assert.equal(config.evaluation.shard_size, 500);
});

test('a ratio against the sampler at temperature 0.6 needs processed log-probabilities and no top-k/top-p', () => {
  const withLearner = (learner: Record<string, unknown>, sampling: Record<string, unknown> = {}) => {
    const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
    assert.equal(doc.episode.sampling.temperature, 0.6, 'local.yaml samples at 0.6, else this checks nothing');
    doc.learner = { ...doc.learner, ...learner };
    doc.episode.sampling = { ...doc.episode.sampling, ...sampling };
    const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
    fs.writeFileSync(file, stringify(doc));
    return file;
  };
  assert.throws(
    () => loadCampaignConfig(withLearner({ is_cap: 2 })),
    /learner\.is_cap: compares with the sampler: the sampler's raw log-probabilities are of temperature 1 and the/,
  );
  assert.throws(
    () => loadCampaignConfig(withLearner({ is_cap: 2 })),
    /the learner's of 0\.6: set learner\.sampler_logprobs/,
  );
  assert.throws(() => loadCampaignConfig(withLearner({ old_logprobs: 'sampler' })), /learner\.old_logprobs: compares/);
  assert.equal(loadCampaignConfig(withLearner({ is_cap: 2, sampler_logprobs: 'processed' })).learner.is_cap, 2);
  assert.throws(
    () => loadCampaignConfig(withLearner({ is_cap: 2, sampler_logprobs: 'processed' }, { top_k: 20 })),
    /learner\.is_cap: compares with the sampler: episode\.sampling top_k 20/,
  );
  assert.equal(loadCampaignConfig(withLearner({}, { top_k: 20 })).episode.sampling.top_k, 20); // no ratio: no rule
});

test('overlapped steps need a lag correction: refused naming learner.is_cap, accepted with is_cap or sampler', () => {
  const overlapped = (learner: Record<string, unknown>) => {
    const doc = parse(fs.readFileSync(withField('training', 'max_staleness', 1), 'utf8')) as Record<string, any>;
    doc.learner = { ...doc.learner, ...learner };
    const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
    fs.writeFileSync(file, stringify(doc));
    return file;
  };
  assert.throws(
    () => loadCampaignConfig(overlapped({})),
    /learner\.is_cap: training\.max_staleness 1 trains on episodes sampled by older weights: set learner\.is_cap/,
  );
  assert.throws(() => loadCampaignConfig(overlapped({ is_cap: 0 })), /learner\.is_cap/);
  const processed = { sampler_logprobs: 'processed' }; // local.yaml samples at temperature 0.6
  assert.equal(loadCampaignConfig(overlapped({ is_cap: 2, ...processed })).training.max_staleness, 1);
  assert.equal(
    loadCampaignConfig(overlapped({ old_logprobs: 'sampler', ...processed })).learner.old_logprobs,
    'sampler',
  );
  assert.equal(loadCampaignConfig(withField('training', 'max_staleness', 0)).training.max_staleness, 0);
});

test('learner.lora needs the embedded vLLM: the built-in server is refused naming learner.lora', () => {
  const lora = (engine: string) => {
    const doc = parse(fs.readFileSync(withField('learner', 'lora', { rank: 8 }), 'utf8')) as Record<string, any>;
    doc.episode.policy = { ...doc.episode.policy, base_url: 'embedded', engine };
    const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
    fs.writeFileSync(file, stringify(doc));
    return file;
  };
  assert.throws(() => loadCampaignConfig(lora('builtin')), /learner\.lora: the embedded builtin server loads no LoRA/);
  assert.equal(loadCampaignConfig(lora('vllm')).learner.lora?.rank, 8);
  assert.throws(() => loadCampaignConfig(withField('learner', 'lora', { rank: 0 })), /learner\.lora\.rank/);
});

test("judge modes default to the reference's: motivation in training, legacy in the probe and the evaluation", () => {
  for (const name of ['local.yaml', 'reference-q38.yaml']) {
    const config = loadCampaignConfig(path.join(repoRoot, 'config', name));
    assert.deepEqual(
      [config.probe.judge_mode, config.training.judge_mode, config.evaluation.judge_mode],
      ['legacy', 'motivation', 'legacy'],
      name,
    );
    assert.equal(config.episode.judge_mode, undefined, `${name}: the campaign sets it per stage`);
  }
  const chosen = loadCampaignConfig(withField('evaluation', 'judge_mode', 'motivation'));
  assert.equal(chosen.evaluation.judge_mode, 'motivation');
  assert.throws(
    () => loadCampaignConfig(withField('training', 'judge_mode', 'fancy')),
    /campaign\.yaml:\d+: training\.judge_mode: /,
  );
});

test('a judge mode for every stage at once (episode.judge_mode) is refused, naming the per-stage fields', () => {
  const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
  doc.episode.judge_mode = 'legacy';
  const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
  fs.writeFileSync(file, stringify(doc));
  assert.throws(() => loadCampaignConfig(file), /episode\.judge_mode: the judge mode is set per stage: use training\./);
});

test('partial_rollouts needs overlapped steps and token mode: refused naming the field, accepted with both', () => {
  const partial = (maxStaleness: number, mode: string) => {
    const doc = parse(fs.readFileSync(path.join(repoRoot, 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
    doc.training = { ...doc.training, partial_rollouts: true, max_staleness: maxStaleness };
    // Overlapped steps need a lag correction (checked above): given, so only partial_rollouts' own rule is met.
    doc.learner = { ...doc.learner, is_cap: 2, sampler_logprobs: 'processed' };
    doc.episode.policy = { ...doc.episode.policy, mode };
    const file = path.join(testTempDir('tbt-config-'), 'campaign.yaml');
    fs.writeFileSync(file, stringify(doc));
    return file;
  };
  // Each refusal on its own line of the message, at the field's path and line.
  const at = 'campaign\\.yaml:\\d+: training\\.partial_rollouts: ';
  const staleness = new RegExp(
    `${at}partial_rollouts continues episodes across a sync of overlapped steps: set ` +
      'training\\.max_staleness >= 1',
  );
  const tokens = new RegExp(
    `${at}partial_rollouts keeps each token's version and log-probability: set episode\\.policy\\.mode: tokens`,
  );
  const refused = (file: string, reasons: RegExp[], not: RegExp[]) =>
    assert.throws(
      () => loadCampaignConfig(file),
      (err: Error) => {
        for (const r of reasons) assert.match(err.message, r);
        for (const r of not) assert.doesNotMatch(err.message, r);
        return true;
      },
    );
  refused(partial(0, 'tokens'), [staleness], [tokens]);
  refused(partial(1, 'chat'), [tokens], [staleness]);
  refused(partial(0, 'chat'), [staleness, tokens], []);
  const accepted = loadCampaignConfig(partial(1, 'tokens'));
  assert.equal(accepted.training.partial_rollouts, true);
  assert.equal(accepted.training.max_staleness, 1);
  assert.equal(loadCampaignConfig(partial(2, 'tokens')).training.partial_rollouts, true);
});

import { spawnSync } from 'node:child_process';
import { learnerHyperparameters, type CampaignConfig } from '../config/campaign-config.ts';
import { BadInputError } from '../core/errors.ts';
import { gpuLearnerDir, pythonBinary, smallModelDir } from '../infra/python-env.ts';

/**
 * The campaign YAML's flat `learner:` section and the learner's own nested config. The learner's dataclasses
 * (gpu-learner/tbt_gpu/learner/config.py) own every hyperparameter's default and bounds; this side only names
 * the fields (`learnerHyperparameters` in config/campaign-config.ts), so the two can never disagree.
 * `resolveLearnerSection` asks the learner to validate a section and fill in its defaults before anything starts.
 */

type LearnerSection = CampaignConfig['learner'];

/** YAML field and [section, field] of the learner config, for every hyperparameter the learner owns. */
const learnerFields = Object.entries(learnerHyperparameters).map(
  ([yamlField, { learnerField }]) => [yamlField as keyof typeof learnerHyperparameters, learnerField] as const,
);

/**
 * The learner's JSON config for a campaign's section; fields left unset take the learner's defaults.
 * `samplingTemperature` is the policy's: the learner divides logits by it (greedy sampling, 0, counts as 1).
 */
export function learnerConfigJson(
  learner: LearnerSection,
  seed: number,
  samplingTemperature = 1,
): Record<string, Record<string, unknown>> {
  const cuda = learner.device === 'cuda';
  const config: Record<string, Record<string, unknown>> = {
    model: {
      path: learner.model_path === 'embedded' ? smallModelDir() : learner.model_path,
      dtype: cuda ? 'bfloat16' : 'float32',
      export_dtype: cuda ? 'bfloat16' : 'float32',
    },
    checkpoint: { dir: '' },
    distributed: {
      device: learner.device,
      backend: cuda ? 'nccl' : 'gloo',
      world_size: learner.nodes * learner.gpus_per_node,
    },
    loss: { temperature: samplingTemperature > 0 ? samplingTemperature : 1 },
    train: { seed },
  };
  for (const [yamlField, [section, field]] of learnerFields) {
    const value = learner[yamlField];
    if (value !== undefined) (config[section] ??= {})[field] = value;
  }
  if (learner.lora) config.lora = { ...learner.lora };
  return config;
}

/** The YAML field a learner config path such as `optimizer.betas[1]` came from. */
export function learnerYamlField(learnerPath: string): string {
  if (learnerPath.startsWith('lora.')) return `learner.${learnerPath}`;
  const [sectionField = '', index = ''] = learnerPath.split(/(?=\[)/);
  for (const [yamlField, [section, field]] of learnerFields) {
    if (`${section}.${field}` === sectionField) return `learner.${yamlField}${index}`;
  }
  return `learner (${learnerPath})`;
}

/**
 * Validates the section with the learner's own config code and returns it with every default filled in (so the
 * workflow memo and the run manifest record every hyperparameter). A rejected value is a BadInputError naming
 * the YAML field, e.g. `learner.eps_low: must be in (0, 1)`.
 */
export function resolveLearnerSection(learner: LearnerSection, seed: number): LearnerSection {
  const config = learnerConfigJson(learner, seed, 1);
  config.checkpoint!.dir = '<checked only>';
  const run = spawnSync(pythonBinary(), ['-m', 'tbt_gpu.learner.check_config'], {
    cwd: gpuLearnerDir,
    input: JSON.stringify(config),
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: gpuLearnerDir },
    timeout: 60_000,
  });
  let answer: { config?: Record<string, Record<string, unknown>>; error?: string };
  try {
    answer = JSON.parse(run.stdout.trim().split('\n').pop() ?? '') as typeof answer;
  } catch {
    throw new Error(`learner config check failed (exit ${run.status}): ${run.stderr || run.error?.message}`);
  }
  if (answer.error !== undefined) {
    const [, where = '', message = answer.error] = /^([a-z_]+\.[a-z_]+(?:\[\d+\])?): (.*)$/s.exec(answer.error) ?? [];
    throw new BadInputError(where ? `${learnerYamlField(where)}: ${message}` : `learner: ${answer.error}`);
  }
  const resolved: Record<string, unknown> = { ...learner };
  for (const [yamlField, [section, field]] of learnerFields) {
    resolved[yamlField] = answer.config![section]![field];
  }
  if (learner.lora) resolved.lora = answer.config!.lora;
  return resolved as LearnerSection;
}

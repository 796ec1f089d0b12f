import type { CampaignConfig } from './campaign-config.ts';

/** The shape of the adapter a LoRA campaign's policy servers serve (docs/lora.md). */
export interface PolicyLora {
  rank: number;
  alpha: number;
  targets: string[];
}

/**
 * `{ lora }` for a campaign whose learner trains LoRA adapters, `{}` otherwise (so a full fine-tuning campaign's
 * activity inputs stay as recorded histories have them). Pure: workflows call it.
 */
export function loraServing(learner: CampaignConfig['learner']): { lora?: PolicyLora } {
  const lora = learner.lora;
  if (!lora) return {};
  if (lora.alpha === undefined || lora.targets === undefined)
    throw new Error('learner.lora: alpha and targets unset (resolveLearnerSection fills them in before a run)');
  return { lora: { rank: lora.rank, alpha: lora.alpha, targets: lora.targets } };
}

/**
 * `{ logprobs: 'processed' }` when the learner compares against the sampled distribution's log-probabilities
 * (`learner.sampler_logprobs: processed`): the embedded vLLM then serves them (`--logprobs-mode processed_logprobs`).
 * `{}` otherwise, so other campaigns' activity inputs stay as recorded histories have them. Pure: workflows call it.
 */
export function logprobsServing(learner: CampaignConfig['learner']): { logprobs?: 'processed' } {
  return learner.sampler_logprobs === 'processed' ? { logprobs: 'processed' } : {};
}

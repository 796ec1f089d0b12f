import { loadCampaignConfig } from '../config/campaign-config.ts';
import { defaultLengths, memoryRefusal, runMemoryModel } from '../cli/memory-verdict.ts';

/**
 * bench:reference-memory: per-GPU and per-node host memory of the learner's training step for a campaign config,
 * from the learner's memory model (gpu-learner/tbt_gpu/learner/memory_model.py): the real model construction and
 * training step under fake tensors at nodes x gpus_per_node ranks, on this machine's CPU, no GPU needed.
 *   npm run bench:reference-memory [-- --config FILE] [-- --lengths 16384,65536,106496] [-- --gpu-limit-gib 75]
 * Default config: config/reference-q38.yaml; default lengths: budget/8, budget/2, the episode budget and 1.5 x it.
 */

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const file = flag('config') ?? 'config/reference-q38.yaml';
const config = loadCampaignConfig(file);
const budget = config.episode.limits.episode_token_budget;
// Past the budget too (x1.5), so the longest episode that fits is interpolated between runs, not extrapolated.
const lengths = flag('lengths')
  ?.split(',')
  .map((v) => Number(v.trim())) ?? [...defaultLengths(budget), Math.round(1.5 * (budget ?? 32_768))];
if (lengths.some((n) => !(Number.isInteger(n) && n >= 2)))
  throw new Error(`--lengths: token counts, got ${flag('lengths')}`);
const gpuLimitGib = Number(flag('gpu-limit-gib') ?? 75);
const { learner } = config;
console.log(
  `${file}: ${learner.model_path}, ${learner.nodes} x ${learner.gpus_per_node} ranks, ` +
    `episode budget ${budget ?? 'none'}, ` +
    `lengths ${lengths.join(',')}, GPU limit ${gpuLimitGib} GiB`,
);
const started = Date.now();
const run = runMemoryModel(config, { lengths, gpuLimitGib, echo: true });
process.stdout.write(run.output);
if (!run.summary) {
  console.error(run.problem);
  process.exit(1);
}
const refusal = budget ? memoryRefusal(run.summary, budget, gpuLimitGib) : undefined;
console.log(`(${((Date.now() - started) / 1000).toFixed(0)} s)${refusal ? `\n${refusal}` : ''}`);

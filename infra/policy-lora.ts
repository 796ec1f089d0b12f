import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { PolicyLora } from '../config/lora-serving.ts';
import { BadInputError } from '../core/errors.ts';
import { gpuLearnerDir, vllmPythonBinary } from './python-env.ts';

/**
 * A policy server in LoRA mode (`learner.lora`, docs/lora.md): vLLM serves the base model with one adapter
 * under a fixed name, which every request names and every step's sync replaces in place. It starts on a zero
 * adapter (exactly the base model), so the name is valid before the first step and never changes.
 */

/** The name requests use for the policy in LoRA mode (`--lora-modules NAME=...`, `load_lora_adapter`). */
export const LORA_ADAPTER_NAME = 'policy-lora';

/** vLLM accepts only these as `--max-lora-rank`. */
const VLLM_MAX_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512];

/** Whether `folder` is a LoRA adapter (a learner's export in LoRA mode) rather than full weights. */
export function isAdapterFolder(folder: string): boolean {
  return fs.existsSync(path.join(folder, 'adapter_config.json'));
}

/** The LoRA arguments of vLLM's command line, after writing the zero adapter it starts on into `adapterDir`. */
export function vllmLoraArgs(lora: PolicyLora, modelDir: string, adapterDir: string): string[] {
  const maxRank = VLLM_MAX_LORA_RANKS.find((r) => r >= lora.rank);
  if (maxRank === undefined) throw new BadInputError(`learner.lora.rank: ${lora.rank} is above vLLM's limit of 512`);
  const args = ['-m', 'tbt_gpu.lora_adapter', '--model', modelDir, '--rank', String(lora.rank)];
  args.push('--alpha', String(lora.alpha), '--targets', lora.targets.join(','), '--out', adapterDir);
  execFileSync(vllmPythonBinary(), args, {
    cwd: gpuLearnerDir,
    env: { ...process.env, PYTHONPATH: gpuLearnerDir, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 120_000,
  });
  return ['--enable-lora', '--max-loras', '1', '--max-lora-rank', String(maxRank)].concat(
    '--lora-modules',
    `${LORA_ADAPTER_NAME}=${adapterDir}`,
  );
}

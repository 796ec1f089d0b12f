import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../config/environment.ts';

/** The Python environment scripts/setup.sh prepared (its path is recorded in .tools/python-venv). */

export function pythonBinary(): string {
  const marker = path.join(repoRoot, '.tools', 'python-venv');
  if (!fs.existsSync(marker))
    throw new Error(`Python environment not set up (${marker} missing): run \`bash scripts/setup.sh\``);
  const python = path.join(fs.readFileSync(marker, 'utf8').trim(), 'bin', 'python');
  if (!fs.existsSync(python))
    throw new Error(`Python environment at ${python} is missing: run \`bash scripts/setup.sh\``);
  return python;
}

/** The vLLM (CPU build) environment scripts/setup.sh prepared (its path is recorded in .tools/vllm-venv). */
export function vllmPythonBinary(): string {
  const marker = path.join(repoRoot, '.tools', 'vllm-venv');
  const python = fs.existsSync(marker) ? path.join(fs.readFileSync(marker, 'utf8').trim(), 'bin', 'python') : '';
  if (!python || !fs.existsSync(python))
    throw new Error(`vLLM environment not set up (${marker} missing or stale): run \`bash scripts/setup.sh\``);
  return python;
}

/** The experiment-tracking environment (mlflow, wandb) scripts/setup.sh prepared (recorded in .tools/tracking-venv). */
export function trackingPythonBinary(): string {
  const marker = path.join(repoRoot, '.tools', 'tracking-venv');
  const python = fs.existsSync(marker) ? path.join(fs.readFileSync(marker, 'utf8').trim(), 'bin', 'python') : '';
  if (!python || !fs.existsSync(python))
    throw new Error(`tracking environment not set up (${marker} missing or stale): run \`bash scripts/setup.sh\``);
  return python;
}

export const trackingPackageDir = path.join(repoRoot, 'tracking');

export const gpuLearnerDir = path.join(repoRoot, 'gpu-learner');

/** Folder of the bundled small model (converted once by scripts/setup.sh; instant afterwards). */
export function smallModelDir(): string {
  return execFileSync(pythonBinary(), ['-m', 'tbt_gpu.model_store'], {
    cwd: gpuLearnerDir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
}

import { spawnSync } from 'node:child_process';
import { gpuLearnerDir, pythonBinary } from '../infra/python-env.ts';

/**
 * bench:memory-calibration: the learner's memory model against a measured run of the same code on this CPU
 * (gpu-learner/tbt_gpu/learner/memory_calibration.py): a random ~130M Qwen3, fp32, 1 and 2 ranks (torchrun, gloo),
 * a few sequence lengths; prints predicted, measured (rank 0's peak RSS minus its RSS before the model) and the
 * ratio per case. Target: within 15%.
 *   npm run bench:memory-calibration [-- --ranks 1,2] [-- --lengths 256,1024] [-- --activation-checkpointing true]
 */

const run = spawnSync(pythonBinary(), ['-m', 'tbt_gpu.learner.memory_calibration', ...process.argv.slice(2)], {
  cwd: gpuLearnerDir,
  env: { ...process.env, PYTHONPATH: gpuLearnerDir, OMP_NUM_THREADS: '1' },
  stdio: 'inherit',
});
process.exit(run.status ?? 1);

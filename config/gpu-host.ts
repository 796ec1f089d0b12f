import type { Environment } from './environment.ts';

/** This host's name for GPU work: its GPU worker polls `<prefix>-gpu-<host>` (TBT_GPU_HOST, default the hostname). */
export const gpuHost = (env: Pick<Environment, 'TBT_GPU_HOST'>) => env.TBT_GPU_HOST;

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { readEnvironment } from '../config/environment.ts';
import { learnerConfigJson } from '../learner-control/learner-config.ts';
import { gpuLearnerDir, pythonBinary } from '../infra/python-env.ts';

/**
 * The learner's memory model (gpu-learner/tbt_gpu/learner/memory_model.py) for a campaign: per-GPU and per-node
 * host memory of one training step at the campaign's episode budget, and the longest episode that fits.
 */

export interface MemorySummary {
  paramsB: number;
  ranks: number;
  peakGpuGib: number;
  peakHostGib: number;
  maxEpisodeTokens: number;
  fits: boolean;
}

export const MEMORY_LINE = new RegExp(
  '^memory: params_b=([\\d.]+) ranks=(\\d+) peak_gpu_gib=([\\d.]+) peak_host_gib=([\\d.]+) ' +
    'max_episode_tokens=(\\d+) fits=(yes|no)$',
);

/** The summary line the memory model prints last, or undefined when its output has none. */
export function parseMemoryLine(output: string): MemorySummary | undefined {
  const line = output.trim().split('\n').pop()?.trim() ?? '';
  const m = MEMORY_LINE.exec(line);
  if (!m) return undefined;
  return {
    paramsB: Number(m[1]),
    ranks: Number(m[2]),
    peakGpuGib: Number(m[3]),
    peakHostGib: Number(m[4]),
    maxEpisodeTokens: Number(m[5]),
    fits: m[6] === 'yes',
  };
}

/** Why a campaign must not start with this memory verdict, or undefined when it fits. */
export function memoryRefusal(summary: MemorySummary, episodeBudget: number, gpuLimitGib: number): string | undefined {
  if (summary.fits) return undefined;
  return (
    `episode.limits.episode_token_budget: ${episodeBudget} tokens do not fit the learner's GPUs ` +
    `(${summary.peakGpuGib} GiB per GPU at that length, limit ${gpuLimitGib} GiB); the longest episode that fits ` +
    `is ${summary.maxEpisodeTokens} tokens. Lower the budget, or cut per-GPU memory (learner.context_parallel, ` +
    'learner.micro_batch_tokens, learner.activation_checkpointing)'
  );
}

export interface MemoryRun {
  /** Everything the model printed (stdout, then stderr when it failed). */
  output: string;
  summary?: MemorySummary;
  /** Why no summary came back, when none did. */
  problem?: string;
}

/** Runs the memory model for `config`'s learner at nodes x gpus_per_node ranks and its episode budget. */
export function runMemoryModel(
  config: CampaignConfig,
  options: { lengths?: number[]; gpuLimitGib?: number; timeoutMs?: number; echo?: boolean } = {},
): MemoryRun {
  const learner = config.learner;
  const ranks = learner.nodes * learner.gpus_per_node;
  const budget = config.episode.limits.episode_token_budget;
  const json = learnerConfigJson(learner, config.seed, config.episode.sampling.temperature);
  json.checkpoint!.dir = os.tmpdir();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-memory-'));
  const configFile = path.join(dir, 'learner.json');
  fs.writeFileSync(configFile, JSON.stringify(json, null, 2));
  const lengths = options.lengths ?? defaultLengths(budget);
  const args = [
    '-m',
    'tbt_gpu.learner.memory_model',
    '--learner-config',
    configFile,
    '--world-size',
    String(ranks),
    '--gpus-per-node',
    String(learner.gpus_per_node),
    '--lengths',
    lengths.join(','),
    '--gpu-limit-gib',
    String(options.gpuLimitGib ?? 75),
    ...(budget ? ['--episode-budget', String(budget)] : []),
  ];
  const run = spawnSync(pythonBinary(), args, {
    cwd: gpuLearnerDir,
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: gpuLearnerDir, OMP_NUM_THREADS: '1' },
    timeout: options.timeoutMs ?? 900_000,
    stdio: ['ignore', 'pipe', options.echo ? 'inherit' : 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
  });
  fs.rmSync(dir, { recursive: true, force: true });
  const output = run.stdout ?? '';
  const summary = run.status === 0 ? parseMemoryLine(output) : undefined;
  if (summary) return { output, summary };
  const why = run.error?.message ?? `exit ${run.status}`;
  const tail = (run.stderr ?? '').trim().split('\n').slice(-5).join('\n');
  return { output, problem: `the memory model did not run (${why})${tail ? `:\n${tail}` : ''}` };
}

/** Two lengths below the budget and the budget itself: enough to interpolate, few enough to run in minutes. */
export function defaultLengths(budget: number | null | undefined): number[] {
  const top = budget && budget > 0 ? budget : 32_768;
  return [...new Set([Math.max(1024, Math.round(top / 8)), Math.max(2048, Math.round(top / 2)), top])].sort(
    (a, b) => a - b,
  );
}

/**
 * What `tbt train --dry-run` prints about memory, and the refusal when the episode budget cannot fit. A learner on
 * CPU, a memory model that cannot run, or TBT_MEMORY_CHECK=off (the model takes ~80 s at 27B on a 2-core machine)
 * gives lines saying so and no refusal.
 */
export function dryRunMemoryVerdict(
  config: CampaignConfig,
  run: (c: CampaignConfig) => MemoryRun = (c) => runMemoryModel(c),
  gpuLimitGib = 75,
): { lines: string[]; refusal?: string } {
  const budget = config.episode.limits.episode_token_budget;
  if (readEnvironment().TBT_MEMORY_CHECK === 'off')
    return { lines: ['  memory       not checked: TBT_MEMORY_CHECK=off'] };
  if (config.learner.device !== 'cuda')
    return { lines: ['  memory       not checked: the memory model is of GPU learners (learner.device: cuda)'] };
  if (!budget) return { lines: ['  memory       not checked: no episode.limits.episode_token_budget to check'] };
  const result = run(config);
  if (!result.summary)
    return { lines: [`  memory       not checked: ${result.problem ?? 'no summary line'}; nothing refused`] };
  const s = result.summary;
  const lines = [
    `  memory       ${s.paramsB}B parameters on ${s.ranks} ranks: ${s.peakGpuGib} GiB per GPU at ${budget} tokens ` +
      `(limit ${gpuLimitGib}), ${s.peakHostGib} GiB host per node; longest episode that fits ` +
      `${s.maxEpisodeTokens} tokens: ${s.fits ? 'fits' : 'does not fit'}`,
  ];
  return { lines, refusal: memoryRefusal(s, budget, gpuLimitGib) };
}

import fs from 'node:fs';
import path from 'node:path';
import { campaignRunDir } from './campaign-run-folder.ts';
import type { StepRecord } from './step-record.ts';

/** The campaign's `steps.jsonl` (one line per step, what `tbt report --steps` reads). */
export function stepsFile(stateDir: string, campaignId: string): string {
  return path.join(campaignRunDir(stateDir, campaignId), 'steps.jsonl');
}

/** Rewrites `file` with one line per step record. */
export function writeStepsFile(file: string, records: StepRecord[]): void {
  fs.writeFileSync(file, records.map((r) => JSON.stringify(stepLine(r))).join('\n') + '\n');
}

function stepLine(r: StepRecord): Record<string, unknown> {
  return {
    step: r.step,
    mean_reward: r.meanReward,
    // Of the groups drawn (replacements included), not of those trained: train_on_fewer trains only
    // informative ones, which read as 100% however many were replaced.
    informative_group_fraction: r.informativeGroups
      ? r.informativeGroups / (r.informativeGroups + r.zeroVarianceGroups)
      : 0,
    loss: Number(r.update.loss ?? 0),
    grad_norm: Number(r.update.grad_norm ?? 0),
    clip_fraction: Number(r.update.clip_fraction ?? 0),
    // The policy lag as the learner measured it (null when the rows carried no sampler log-probabilities).
    sampler_log_ratio_mean: r.update.sampler_log_ratio_mean ?? null,
    sampler_kl: r.update.sampler_kl ?? null,
    is_truncated_fraction: r.update.is_truncated_fraction ?? null,
    groups: r.groups.length,
    infra_errors_refilled: r.infraErrors,
    zero_variance_replaced: r.replacements,
    wall_s: Number(r.update.time_s ?? 0),
    // Which weights trained: `full`, or `lora` (adapters only, `trainable_parameters` of them).
    training_mode: r.update.mode ?? 'full',
    trainable_parameters: r.update.trainable_parameters ?? null,
    weight_version: r.weightVersion ?? null,
    sampled_weight_version: r.sampledWeightVersion ?? null,
    stale_episodes_dropped: r.staleEpisodes ?? 0,
    lag_mean: r.episodeLag?.mean ?? null,
    lag_max: r.episodeLag?.max ?? null,
    // Trained tokens per sampler version; null when the episodes carried no token versions.
    version_mix: r.versionMix ?? null,
    weight_sync_s: r.syncSeconds ?? [],
    // Where the step's time went (overlapped steps sample during the previous step's update).
    sample_s: r.phaseSeconds?.sample ?? null,
    update_s: r.phaseSeconds?.update ?? null,
    drain_s: r.phaseSeconds?.drain ?? null,
    sync_s: r.phaseSeconds?.sync ?? null,
    // The learner had trained this step on another batch than a re-run drew: the line describes the batch trained.
    batch_mismatch: r.batchMismatch ?? false,
  };
}

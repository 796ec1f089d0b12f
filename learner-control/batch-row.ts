import { z } from 'zod';
import type { Trajectory } from '../rollout/policy-driver.ts';

/**
 * One line of a batch file (JSONL): a trajectory and its advantage, as the learner reads it
 * (gpu-learner/tbt_gpu/learner/batch.py). Its JSON Schema is committed as batchRowSchemaFile, and both sides are
 * tested against that file: this one writes valid rows, the learner loads them and requires what it requires.
 */

export const batchRowSchemaFile = 'gpu-learner/tbt_gpu/learner/batch_row.schema.json';

export const batchRowSchema = z
  .looseObject({
    trajectory_id: z.string().min(1).describe('Unique within the batch file: the episode id'),
    input_ids: z
      .array(z.number().int().min(0))
      .min(2)
      .describe("Every token of the episode (prompt included), each below the model's vocabulary size"),
    loss_mask: z
      .array(z.number().int().min(0).max(1))
      .describe('As long as input_ids; 1 trains token t (its log-probability given tokens < t), so item 0 is 0'),
    old_logprobs: z
      .array(z.number())
      .optional()
      .describe("As long as input_ids: the sampler's log-probability of token t (<= 0 where the mask is 1)"),
    sampler_versions: z
      .array(z.number().int().min(-1))
      .optional()
      .describe('As long as input_ids: the weight version that sampled token t (>= 0 where the mask is 1, else -1)'),
    advantage: z.number().describe("The episode's advantage, shared by its trained tokens"),
  })
  .describe('One line of a batch file; other keys are allowed and ignored by the learner (metadata)');

export type BatchRow = z.infer<typeof batchRowSchema>;

/** The batch row of an episode's token trajectory (the keys in the order batch files have always had them). */
export function batchRow(item: { episodeId: string; advantage: number }, trajectory: Trajectory): BatchRow {
  return {
    trajectory_id: item.episodeId,
    input_ids: trajectory.tokenIds,
    loss_mask: trajectory.lossMask,
    old_logprobs: trajectory.logprobs,
    ...(trajectory.versions ? { sampler_versions: trajectory.versions } : {}),
    advantage: item.advantage,
  };
}

/** The JSON Schema committed at batchRowSchemaFile. */
export function batchRowJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(batchRowSchema);
}

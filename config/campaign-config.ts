import fs from 'node:fs';
import { z } from 'zod';
import { episodeConfigSchema } from './episode-config.ts';
import { checkLearnerTopology } from './learner-topology.ts';
import { formatProblem, parseYamlFile } from './yaml-file.ts';

/**
 * A training campaign: which tasks, how to probe and select them, the GRPO loop, the learner's
 * hyperparameters and topology, and the evaluation. Every field has a default or is required; the resolved
 * config goes into the run manifest and the workflow memo.
 */

const band = z.enum(['too_hard', 'hard', 'medium', 'easy', 'too_easy']);

// Hyperparameters are named here but owned by the learner (gpu-learner/tbt_gpu/learner/config.py): their
// defaults and bounds live only there, and `tbt train` has the learner check them (learner-control/learner-config.ts).
const learnerOwned = (what: string) => `${what}; default and bounds: the learner's config, checked at tbt train`;

export const learnerSchema = z
  .object({
    model_path: z.string().default('embedded').describe("Local HF model folder; 'embedded' = the bundled small model"),
    nodes: z.number().int().min(1).default(1).describe('Learner nodes'),
    gpus_per_node: z.number().int().min(1).default(1).describe('Processes per node (GPUs; CPU processes locally)'),
    world_size: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe('Total learner ranks, when stated: must equal nodes x gpus_per_node'),
    rdzv_endpoint: z
      .string()
      .optional()
      .describe('host:port of the c10d rendezvous on node 0 (torchrun --rdzv-endpoint); required when nodes > 1'),
    gpu_workers: z
      .array(
        z
          .object({
            host: z.string().min(1).describe("The GPU worker's host name (TBT_GPU_HOST): its task queue"),
            node_rank: z.number().int().min(0).describe('The node rank whose ranks that worker starts'),
          })
          .strict(),
      )
      .optional()
      .describe("One GPU worker per learner node; default: this host's, as node 0 of one node"),
    attach_url: z
      .string()
      .url()
      .optional()
      .describe('Control URL of a learner started outside the GPU workers (they then start none); it must be healthy'),
    attach_token_file: z
      .string()
      .optional()
      .describe("With attach_url: that learner's control.token file (0600), read by node 0's GPU worker"),
    device: z.enum(['cpu', 'cuda']).default('cpu').describe('cpu = gloo + fp32; cuda = nccl + bf16'),
    lr: z.number().optional().describe(learnerOwned('AdamW learning rate')),
    betas: z.tuple([z.number(), z.number()]).optional().describe(learnerOwned('AdamW (beta1, beta2)')),
    eps: z.number().optional().describe(learnerOwned('AdamW epsilon')),
    weight_decay: z.number().optional().describe(learnerOwned('AdamW decoupled weight decay (0 unless set)')),
    grad_clip: z.number().optional().describe(learnerOwned('Gradient-norm clip')),
    eps_low: z.number().optional().describe(learnerOwned('PPO clip below 1')),
    eps_high: z.number().optional().describe(learnerOwned('PPO clip above 1 (DAPO: 0.28)')),
    dual_clip_c: z.number().optional().describe(learnerOwned('Dual clip for negative advantages')),
    old_logprobs: z
      .enum(['recompute', 'sampler'])
      .optional()
      .describe(
        learnerOwned("Old log-probabilities of the ratio: the learner's own before the update, or the sampler's"),
      ),
    micro_batch_tokens: z.number().optional().describe(learnerOwned('Tokens per micro-batch')),
    share_prompts: z
      .boolean()
      .optional()
      .describe(learnerOwned("A group's episodes share one forward pass of their prompt (same gradient)")),
    cpu_offload: z.boolean().optional().describe(learnerOwned('FSDP2 parameter and optimizer offload')),
    activation_checkpointing: z.boolean().optional().describe(learnerOwned('Recompute decoder activations')),
    keep_checkpoints: z.number().optional().describe(learnerOwned('Checkpoints kept')),
    hourly_price_usd: z
      .number()
      .min(0)
      .default(0)
      .describe('Per learner process-hour, for the training cost in reports'),
  })
  .strict()
  .superRefine(checkLearnerTopology);

export const campaignConfigSchema = z
  .object({
    name: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]*$/)
      .describe('Campaign name; the workflow id is derived from it'),
    suite: z.string().describe('Task suite folder (scenarios/ + tasks/)'),
    exclude_uids: z
      .string()
      .optional()
      .describe('File of uids that must never be trained on (an evaluation-only benchmark)'),
    seed: z.number().int().default(42),
    prices: z
      .string()
      .optional()
      .describe(
        'Price table YAML (USD per million tokens per role, config/price-table.ts) for costs in evaluations and the ' +
          'report',
      ),
    episode: episodeConfigSchema.describe(
      'Episode settings; policy.base_url "embedded" = the embedded CPU policy server',
    ),
    probe: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe('false = no probe: every candidate is in the training pool (a benchmark whose split is fixed)'),
        repeats: z.number().int().min(1).default(8).describe('Probe episodes per candidate task'),
        concurrency: z.number().int().min(1).default(8).describe('Probe episodes in flight (across all shards)'),
        shard_size: z
          .number()
          .int()
          .min(1)
          .default(500)
          .describe('Keys (task x repeat) per shard workflow; about 6 history events each'),
        min_clean_runs: z.number().int().min(1).default(3),
        retain_bands: z.array(band).default(['hard', 'medium', 'easy']),
        max_candidates: z.number().int().min(1).optional().describe('Probe only the first N candidates (by uid)'),
      })
      .strict(),
    training: z
      .object({
        steps: z.number().int().min(1).describe('Optimizer steps'),
        groups_per_step: z.number().int().min(1).describe('Informative groups per update (reference: 18)'),
        group_size: z.number().int().min(2).describe('Episodes per group, G (reference: 8)'),
        concurrency: z.number().int().min(1).default(8).describe('Episodes in flight per step'),
        normalize_std: z.boolean().default(true).describe('Divide advantages by the group std (false = Dr. GRPO)'),
        infra_refill_cap: z
          .number()
          .int()
          .min(0)
          .default(4)
          .describe(
            'Extra episodes per group to replace ones lost to infrastructure errors; past it the group is dropped ' +
              'and replaced by a fresh task',
          ),
        max_replacements: z
          .number()
          .int()
          .min(0)
          .default(8)
          .describe('Fresh tasks pulled per step to replace zero-variance (or infrastructure-lost) groups'),
        max_staleness: z
          .number()
          .int()
          .min(0)
          .default(0)
          .describe(
            'Weight versions an episode may lag behind the step that trains on it; older ones are dropped and ' +
              'refilled (0 = on-policy)',
          ),
        task_order: z
          .enum(['seeded', 'by_family'])
          .default('seeded')
          .describe(
            "How each step draws its tasks: a seeded order over the pool, or 'by_family': one task of every " +
              'family (uid without its trailing instance number) before a second of any, rotating the families ' +
              'over the steps',
          ),
        zero_variance_fallback: z
          .enum(['train_on_fewer', 'keep_zero_variance'])
          .default('train_on_fewer')
          .describe(
            'After max_replacements: train on the informative groups found, or fill up with zero-variance groups ' +
              '(advantage 0)',
          ),
      })
      .strict(),
    learner: learnerSchema.prefault({}),
    evaluation: z
      .object({
        repeats: z.number().int().min(1).default(4).describe('Attempts per task (k)'),
        tasks: z
          .enum(['pool', 'all', 'held_out'])
          .default('pool')
          .describe(
            'Evaluate on the training pool, every suite task, or only the held-out tasks (exclude_uids and ' +
              'evaluation-only ones), disjoint from training',
          ),
        concurrency: z.number().int().min(1).default(8).describe('Evaluation episodes in flight (across all shards)'),
        shard_size: z
          .number()
          .int()
          .min(1)
          .default(500)
          .describe('Keys (task x repeat) per shard workflow; about 6 history events each'),
        before_training: z.boolean().default(true).describe('Also evaluate the base policy'),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type CampaignConfig = z.infer<typeof campaignConfigSchema>;

export function loadCampaignConfig(file: string): CampaignConfig {
  if (!fs.existsSync(file)) throw new Error(`${file}: no such config file`);
  const { value, problems } = parseYamlFile(file, campaignConfigSchema);
  if (!value) throw new Error(`invalid campaign config:\n${problems.map(formatProblem).join('\n')}`);
  return Object.freeze(value);
}

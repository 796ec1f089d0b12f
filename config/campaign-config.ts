import fs from 'node:fs';
import { z } from 'zod';
import { episodeConfigSchema, judgeModeSchema } from './episode-config.ts';
import { checkLearnerTopology } from './learner-topology.ts';
import { trackingConfigSchema } from './tracking-config.ts';
import { formatProblem, parseYamlFile } from './yaml-file.ts';
import { BadInputError } from '../core/errors.ts';

/**
 * A training campaign: which tasks, how to probe and select them, the GRPO loop, the learner's
 * hyperparameters and topology, and the evaluation. Every field has a default or is required; the resolved
 * config goes into the run manifest and the workflow memo.
 */

const band = z.enum(['too_hard', 'hard', 'medium', 'easy', 'too_easy']);

// Hyperparameters are named here but owned by the learner (gpu-learner/tbt_gpu/learner/config.py): their
// defaults and bounds live only there, and `tbt train` has the learner check them (learner-control/learner-config.ts).
const learnerOwned = (what: string) => `${what}; default and bounds: the learner's config, checked at tbt train`;

/** A learner-owned hyperparameter: the YAML type, what it means, and the learner config field it sets. */
function owned<T extends z.ZodType>(type: T, about: string, section: string, field: string) {
  return { type, about, learnerField: [section, field] as const };
}

/**
 * Every hyperparameter the learner owns, written once: its YAML type and meaning, and the [section, field] of the
 * learner's config it sets. A new one is a line here plus its dataclass field (test/unit/learner-config.test.ts
 * checks that every field here exists there).
 */
export const learnerHyperparameters = {
  lr: owned(z.number(), 'AdamW learning rate', 'optimizer', 'lr'),
  betas: owned(z.tuple([z.number(), z.number()]), 'AdamW (beta1, beta2)', 'optimizer', 'betas'),
  eps: owned(z.number(), 'AdamW epsilon', 'optimizer', 'eps'),
  weight_decay: owned(z.number(), 'AdamW decoupled weight decay (0 unless set)', 'optimizer', 'weight_decay'),
  grad_clip: owned(z.number(), 'Gradient-norm clip', 'train', 'grad_clip'),
  eps_low: owned(z.number(), 'PPO clip below 1', 'loss', 'eps_low'),
  eps_high: owned(z.number(), 'PPO clip above 1 (DAPO: 0.28)', 'loss', 'eps_high'),
  dual_clip_c: owned(z.number(), 'Dual clip for negative advantages', 'loss', 'dual_clip_c'),
  old_logprobs: owned(
    z.enum(['recompute', 'sampler']),
    "Old log-probabilities of the ratio: the learner's own before the update, or the sampler's",
    'loss',
    'old_logprobs',
  ),
  is_cap: owned(
    z.number(),
    "Truncated importance ratio against the sampler's log-probabilities, capped here (0 = off)",
    'loss',
    'is_cap',
  ),
  micro_batch_tokens: owned(z.number(), 'Tokens per micro-batch', 'train', 'micro_batch_tokens'),
  logprob_chunk_tokens: owned(
    z.number(),
    'Scored tokens projected onto the vocabulary at once (never a full [tokens, vocabulary] tensor)',
    'train',
    'logprob_chunk_tokens',
  ),
  context_parallel: owned(
    z.number(),
    "Ranks of a node that split one episode's sequence (context parallelism) for episodes longer than a GPU holds",
    'train',
    'context_parallel',
  ),
  sampler_logprobs: owned(
    z.enum(['raw', 'processed']),
    "What the sampler's log-probabilities are of: raw (temperature 1) or processed (the distribution sampled); " +
      'the embedded vLLM serves what this says',
    'loss',
    'sampler_logprobs',
  ),
  share_prompts: owned(
    z.boolean(),
    "A group's episodes share one forward pass of their prompt (same gradient)",
    'train',
    'share_prompts',
  ),
  cpu_offload: owned(z.boolean(), 'FSDP2 parameter and optimizer offload', 'fsdp', 'cpu_offload'),
  activation_checkpointing: owned(z.boolean(), 'Recompute decoder activations', 'fsdp', 'activation_checkpointing'),
  keep_checkpoints: owned(z.number(), 'Checkpoints kept', 'checkpoint', 'keep_last'),
};

type LearnerHyperparameters = typeof learnerHyperparameters;

// Optional in the YAML: a field left unset takes the learner's default.
const learnerHyperparameterShape = Object.fromEntries(
  Object.entries(learnerHyperparameters).map(([name, { type, about }]) => [
    name,
    type.optional().describe(learnerOwned(about)),
  ]),
) as { [K in keyof LearnerHyperparameters]: z.ZodOptional<LearnerHyperparameters[K]['type']> };

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
    weight_transport_host: z
      .string()
      .min(1)
      .optional()
      .describe(
        "Address the policy servers' workers reach learner rank 0 on for a collective weight sync " +
          '(episode.policy.weight_transport: collective; its TCPStore and the gloo/NCCL group listen there): a host ' +
          "name or IP of node 0 on the servers' network. Default: the learner's control host (127.0.0.1 for a " +
          'local learner, which reaches local servers only)',
      ),
    release_outside_training: z
      .boolean()
      .default(true)
      .describe(
        'Stop the learner while the campaign probes and evaluates, freeing its GPUs; the next training step ' +
          'starts it again from its last checkpoint (the start-up time is in the step metrics). Not with attach_url',
      ),
    ...learnerHyperparameterShape,
    lora: z
      .object({
        rank: z.number().int().min(1).describe('Adapter rank (vLLM serves ranks up to 512)'),
        alpha: z.number().positive().optional().describe(learnerOwned('Adapter scale numerator: alpha / rank')),
        targets: z
          .array(z.string().min(1))
          .min(1)
          .optional()
          .describe(learnerOwned('Linear modules that get adapters, by name (q_proj, ..., down_proj)')),
      })
      .strict()
      .optional()
      .describe(
        "Train LoRA adapters only (the base weights freeze) and hot-load each step's adapter into the policy " +
          'servers instead of full weights (docs/lora.md); unset = full fine-tuning',
      ),
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
          .describe(
            'Most keys (task x repeat) per shard workflow; the history budget may plan fewer (history-budget.ts)',
          ),
        min_clean_runs: z.number().int().min(1).default(3),
        retain_bands: z.array(band).default(['hard', 'medium', 'easy']),
        max_candidates: z.number().int().min(1).optional().describe('Probe only the first N candidates (by uid)'),
        judge_mode: judgeModeSchema
          .default('legacy')
          .describe(
            'Judge mode of probe episodes (reference: legacy, as its probes are `tb infer` runs, whose judge_type ' +
              'defaults to legacy)',
          ),
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
            'Weight versions an episode may lag behind the weights that train on it. 0: synchronous steps ' +
              '(sample, update, sync). 1 or more: the next step samples while this one updates, its weights synced ' +
              'between episodes; older episodes are dropped and refilled (docs/async-training.md)',
          ),
        partial_rollouts: z
          .boolean()
          .optional()
          .describe(
            'Off when absent. With max_staleness >= 1: a weight sync does not wait for the episodes in flight; the ' +
              'servers cut their generations short (vLLM /pause?mode=abort), keeping their tokens and log-probs, ' +
              'and each episode goes on on the new weights. Every token records the version that sampled it; the ' +
              "staleness bound counts an episode's oldest token (docs/async-training.md)",
          ),
        task_order: z
          .enum(['epoch', 'seeded', 'by_family'])
          .default('epoch')
          .describe(
            "How steps draw their tasks. 'epoch' (the reference's): the pool shuffled once per epoch by the seed, " +
              'each step (replacements included) taking the next tasks, a step crossing into the next epoch where ' +
              "one ends; 'seeded': a fresh seeded order over the pool for every step; 'by_family': one task of " +
              'every family (uid without its trailing instance number) before a second of any, rotating the ' +
              'families over the steps',
          ),
        zero_variance_fallback: z
          .enum(['train_on_fewer', 'keep_zero_variance'])
          .default('train_on_fewer')
          .describe(
            'After max_replacements: train on the informative groups found, or fill up with zero-variance groups ' +
              '(advantage 0)',
          ),
        judge_mode: judgeModeSchema
          .default('motivation')
          .describe(
            "Judge mode of training episodes (reference: motivation, its training grader's judge_type; " +
              'legacy asks for a bare yes or no)',
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
          .describe(
            'Most keys (task x repeat) per shard workflow; the history budget may plan fewer (history-budget.ts)',
          ),
        before_training: z.boolean().default(true).describe('Also evaluate the base policy'),
        task_errors: z
          .enum(['list', 'fail'])
          .default('list')
          .describe(
            "Keys whose task's own test code raised the same exception twice (task errors): score the other tasks " +
              'and list these (list), or fail the evaluation naming them (fail)',
          ),
        judge_mode: judgeModeSchema
          .default('legacy')
          .describe(
            'Judge mode of evaluation episodes, in a campaign and in tbt eval run / schedule (reference: legacy, ' +
              "`tb infer`'s default)",
          ),
      })
      .strict()
      .prefault({}),
    recovery: z
      .object({
        paused_stage_retry_ms: z
          .number()
          .int()
          .min(1000)
          .default(300_000)
          .describe(
            'A stage paused by an infrastructure failure (an endpoint down, no GPU worker) retries by itself after ' +
              'this long, doubling each time',
          ),
        paused_stage_retry_max_ms: z
          .number()
          .int()
          .min(1000)
          .default(3_600_000)
          .describe('Longest wait between automatic retries of a paused stage'),
        gpu_queue_wait_ms: z
          .number()
          .int()
          .min(10_000)
          .default(1_800_000)
          .describe('How long a GPU activity waits for a worker on its queue before the campaign pauses, naming it'),
        rollout_queue_wait_ms: z
          .number()
          .int()
          .min(10_000)
          .default(1_800_000)
          .describe(
            'How long the rollout queue may have no poller while a stage waits on it before the campaign pauses, ' +
              'naming it; never less than episode.limits.wall_clock_ms (a busy worker polls when an episode ends)',
          ),
        bookkeeping_queue_wait_ms: z
          .number()
          .int()
          .min(10_000)
          .default(900_000)
          .describe(
            'How long the bookkeeping queue may have no poller while a stage waits on it before the campaign ' +
              'pauses, naming it',
          ),
      })
      .strict()
      .prefault({})
      .describe('How the campaign rides out infrastructure failures (docs/operations.md, "Failure classes")'),
    tracking: trackingConfigSchema
      .optional()
      .describe('Experiment trackers (MLflow, W&B) for every step and evaluation; off unless set'),
  })
  .strict()
  .superRefine(checkJudgeModeByStage)
  .superRefine(checkLagCorrection)
  .superRefine(checkPartialRollouts)
  .superRefine(checkSamplerRatio)
  .superRefine(checkLoraServer);

/** The judge mode is a stage's (training differs from evaluation in the reference): one for all would be ignored. */
function checkJudgeModeByStage(config: { episode: { judge_mode?: string } }, ctx: z.RefinementCtx): void {
  if (config.episode.judge_mode === undefined) return;
  ctx.addIssue({
    code: 'custom',
    path: ['episode', 'judge_mode'],
    message:
      'the judge mode is set per stage: use training.judge_mode (default motivation), evaluation.judge_mode and ' +
      'probe.judge_mode (default legacy)',
  });
}

/** LoRA adapters are hot-loaded by vLLM; the built-in embedded server loads full weights only (docs/lora.md). */
function checkLoraServer(
  config: { episode: { policy: { base_url: string; engine: string } }; learner: { lora?: unknown } },
  ctx: z.RefinementCtx,
): void {
  const { policy } = config.episode;
  if (!config.learner.lora || policy.base_url !== 'embedded' || policy.engine === 'vllm') return;
  ctx.addIssue({
    code: 'custom',
    path: ['learner', 'lora'],
    message: `the embedded ${policy.engine} server loads no LoRA adapters: set episode.policy.engine: vllm`,
  });
}

/**
 * Overlapped steps train on episodes up to max_staleness versions old: the loss must correct for that lag, with the
 * truncated importance ratio (is_cap) or a PPO ratio against the sampler's own log-probabilities. An uncorrected
 * loss at a lag of 3 diverged in a published report (docs/async-training.md).
 */
function checkLagCorrection(
  config: { training: { max_staleness: number }; learner: { is_cap?: number; old_logprobs?: string } },
  ctx: z.RefinementCtx,
): void {
  const { training, learner } = config;
  if (training.max_staleness === 0 || learner.old_logprobs === 'sampler' || (learner.is_cap ?? 0) >= 1) return;
  ctx.addIssue({
    code: 'custom',
    path: ['learner', 'is_cap'],
    message:
      `training.max_staleness ${training.max_staleness} trains on episodes sampled by older weights: set ` +
      'learner.is_cap (2 is typical) or learner.old_logprobs: sampler so the loss corrects for the lag',
  });
}

/**
 * Partial rollouts interrupt the episodes of the next step while they sample ahead: only overlapped steps have
 * such episodes, and only token mode keeps the tokens and log-probabilities a turn goes on from.
 */
function checkPartialRollouts(
  config: { training: { max_staleness: number; partial_rollouts?: boolean }; episode: { policy: { mode: string } } },
  ctx: z.RefinementCtx,
): void {
  const { training, episode } = config;
  if (!training.partial_rollouts) return;
  if (training.max_staleness < 1)
    ctx.addIssue({
      code: 'custom',
      path: ['training', 'partial_rollouts'],
      message: 'partial_rollouts continues episodes across a sync of overlapped steps: set training.max_staleness >= 1',
    });
  if (episode.policy.mode !== 'tokens')
    ctx.addIssue({
      code: 'custom',
      path: ['training', 'partial_rollouts'],
      message: "partial_rollouts keeps each token's version and log-probability: set episode.policy.mode: tokens",
    });
}

/**
 * A ratio against the sampler (is_cap, old_logprobs: sampler) compares the sampler's log-probabilities with the
 * learner's tempered ones: only alike when the sampler's are of the same distribution. vLLM's default (raw) ones are
 * of temperature 1; processed ones are of the distribution sampled, which top-k/top-p truncate where the learner
 * does not. At temperature 0.6 the raw ratio weighed tokens 1.32 on average at lag 0 and capped 13.5% of them.
 */
function checkSamplerRatio(
  config: {
    episode: { sampling: { temperature: number; top_k: number; top_p: number }; policy: { base_url: string } };
    learner: { is_cap?: number; old_logprobs?: string; sampler_logprobs?: string };
  },
  ctx: z.RefinementCtx,
): void {
  const { episode, learner } = config;
  const field = (learner.is_cap ?? 0) > 0 ? 'is_cap' : learner.old_logprobs === 'sampler' ? 'old_logprobs' : null;
  if (field === null) return;
  const { temperature, top_k, top_p } = episode.sampling;
  let problem: string | undefined;
  if (top_k > 0 || top_p < 1)
    problem =
      `episode.sampling top_k ${top_k} / top_p ${top_p} truncate the sampled distribution, which the learner's ` +
      'log-probabilities do not: sample with top_k -1 and top_p 1';
  else if (temperature !== 1 && temperature !== 0 && learner.sampler_logprobs !== 'processed')
    problem =
      `the sampler's raw log-probabilities are of temperature 1 and the learner's of ${temperature}: set ` +
      'learner.sampler_logprobs: processed (the embedded vLLM then serves them; an external vLLM needs ' +
      '--logprobs-mode processed_logprobs) or sample at temperature 1';
  if (problem)
    ctx.addIssue({ code: 'custom', path: ['learner', field], message: `compares with the sampler: ${problem}` });
}

export type CampaignConfig = z.infer<typeof campaignConfigSchema>;

export function loadCampaignConfig(file: string): CampaignConfig {
  if (!fs.existsSync(file)) throw new BadInputError(`${file}: no such config file`);
  const { value, problems } = parseYamlFile(file, campaignConfigSchema);
  if (!value) throw new BadInputError(`invalid campaign config:\n${problems.map(formatProblem).join('\n')}`);
  return Object.freeze(value);
}

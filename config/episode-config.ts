import { z } from 'zod';

/** Episode settings: endpoints, sampling, simulated user, limits. Validated once; the schema is the type. */

/**
 * The only variables an endpoint may send as its key: names ending in `_API_KEY`. This keeps every other
 * secret of the process (DATABASE_URL, TBT_*_PASSWORD) from ever leaving as a bearer token.
 */
export const apiKeyVariablePattern = /^[A-Z][A-Z0-9_]*_API_KEY$/;

export const endpointSchema = z
  .object({
    base_url: z.string().url().describe('OpenAI-compatible base URL including /v1'),
    model: z.string().min(1).describe('Model name sent with each request'),
    api_key_env: z
      .string()
      .regex(
        apiKeyVariablePattern,
        'expected the name of a variable ending in _API_KEY (e.g. TBT_POLICY_API_KEY, OPENAI_API_KEY)',
      )
      .optional()
      .describe('Variable holding the API key, read at call time, sent only to hosts tied to it; unset = no key'),
    timeout_ms: z.number().int().positive().default(300_000).describe('Per-request timeout'),
  })
  .strict();

/**
 * How the judge asks a rubric's yes/no question (the reference's `judge_type`, `thinkingbox.common.Judge`): `legacy`
 * wants a bare Yes or No; `motivation` wants JSON with a short reason and reads a reply that is not JSON as no.
 */
export const judgeModeSchema = z.enum(['legacy', 'motivation']);
export type JudgeMode = z.infer<typeof judgeModeSchema>;

export const thinkingboxSettingsSchema = z
  .object({
    // Each warm process is a started sandbox (up to its memory total) held on every worker for every server of
    // every imported suite: a typo like 2000 would exhaust the worker's memory and processes before any episode.
    warm_processes: z
      .number()
      .int()
      .min(0)
      .max(16)
      .default(2)
      .describe('Started tool-server processes kept ready per server (imported ThinkingBox tasks)'),
    server_start: z
      .enum(['template', 'process'])
      .default('template')
      .describe(
        "'template': fork each episode's server from a template process that imported the MCP SDK once; " +
          "'process': spawn each one cold",
      ),
    server_start_timeout_ms: z
      .number()
      .int()
      .min(1)
      .default(30_000)
      .describe('Spawn to MCP initialize; longer is an infrastructure error'),
    // 15 min, the sandbox's default CPU limit per process: a longer test holds its sandbox (and the grading
    // activity) with no progress, and above 2^31-1 ms Node's timer fires at once instead of never.
    test_timeout_ms: z
      .number()
      .int()
      .min(1)
      .max(900_000)
      .default(60_000)
      .describe('Test-code run limit; longer is an infrastructure error'),
    native_grading: z
      .boolean()
      .default(true)
      .describe('Grade the common hash-and-rubrics test body natively instead of in Python'),
    // Test code chooses how often and with what settings it asks the judge, on the operator's key (third review,
    // finding 14): these are the operator's maxima (datasets/thinkingbox/judge-limits.ts). A bench rubric test
    // asks a few yes/no questions of 128 tokens; the shim's largest preset is 1024.
    judge_calls_per_test: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(32)
      .describe('Judge calls one test case may make (one at a time); more is an infrastructure error'),
    judge_max_completion_tokens: z
      .number()
      .int()
      .min(1)
      .max(65_536)
      .default(1024)
      .describe("Largest max_completion_tokens sent to the judge; a test's larger setting is lowered to it"),
  })
  .strict()
  .prefault({})
  .describe('Imported ThinkingBox tasks: tool-server pool and test-code grading');

export const episodeConfigSchema = z
  .object({
    policy: endpointSchema.extend({
      base_url: z
        .union([z.literal('embedded'), z.string().url()])
        .describe(
          "Policy server base URL including /v1; 'embedded' = the embedded CPU policy server the GPU worker runs",
        ),
      mode: z
        .enum(['chat', 'tokens'])
        .default('chat')
        .describe('chat = messages in/text out (evaluation); tokens = token-exact (training)'),
      engine: z
        .enum(['vllm', 'builtin'])
        .default('vllm')
        .describe("Server that base_url 'embedded' starts: vLLM's CPU build, or the hand-written built-in server"),
      sync_instances: z
        .array(z.string().url())
        .optional()
        .describe(
          'Policy server instances a campaign syncs weights into after every step (base URLs with /v1; default: ' +
            'base_url itself)',
        ),
      weight_transport: z
        .enum(['disk', 'collective'])
        .default('disk')
        .describe(
          "How a step's weights reach the servers: disk = each server loads the exported folder; collective = " +
            'the learner sends them over a gloo/NCCL group (vLLM started with the tbt_gpu weight receiver; any ' +
            'other server, or a failed push, falls back to disk)',
        ),
      sync_deadline_ms: z
        .number()
        .int()
        .min(1)
        .default(300_000)
        .describe('Deadline of one weight sync (pause, reload, reset prefix cache, resume) into one server'),
      weight_version: z
        .number()
        .int()
        .min(0)
        .optional()
        .describe('Set by a campaign: the weight version the servers hold, recorded with each episode; leave unset'),
      newer_weights: z
        .boolean()
        .optional()
        .describe(
          'Set by a campaign with training.partial_rollouts: a later version of its weights may serve the ' +
            "episode's next completions (a sync interrupted it); leave unset",
        ),
    }),
    sampling: z
      .object({
        temperature: z.number().min(0).default(1).describe('Policy sampling temperature'),
        top_p: z.number().gt(0).max(1).default(1),
        top_k: z
          .number()
          .int()
          .min(-1)
          .default(-1)
          .describe('Sample from the k most likely tokens only (-1 = all; the reference samples with top-k 20)'),
        seed: z.number().int().optional(),
        stop: z
          .array(z.string())
          .default([])
          .describe(
            'Stop strings (token mode), kept in the output; e.g. ["</tool_call>"] for small models that ramble after ' +
              'a call',
          ),
        parallel_tool_calls: z
          .boolean()
          .optional()
          .describe(
            'Sent as parallel_tool_calls with every chat request that offers tools (unset: not sent, the ' +
              "server's default). The reference's client sends false; its agent files' field is not read",
          ),
      })
      .strict()
      .prefault({}),
    user: z
      .discriminatedUnion('mode', [
        z.object({ mode: z.literal('scripted') }).strict(),
        z
          .object({
            mode: z.literal('llm'),
            endpoint: endpointSchema
              .optional()
              .describe(
                "The user model's endpoint; unset = the policy's own server and model (no other model needed; in a " +
                  "campaign the user then speaks with the policy's current weights)",
              ),
            temperature: z.number().min(0).default(0.3).describe('Sampling temperature (reference: 0.3)'),
            max_tokens: z
              .number()
              .int()
              .min(1)
              .default(4096)
              .describe("Generation cap per reply (reference: 4,096, its user model's max_completion_tokens)"),
          })
          .strict(),
      ])
      .prefault({ mode: 'llm' })
      .describe(
        "Simulated user: an LLM prompted as the reference's user simulator (core/user-simulator-prompt.ts), the " +
          "default as in the reference, or 'scripted': the task's user_replies in order (offline tests), the " +
          'conversation ending when they run out (finish reason user_script_ended)',
      ),
    judge: endpointSchema.optional().describe('Yes/no rubric judge (required for tasks with rubrics)'),
    judge_mode: judgeModeSchema
      .optional()
      .describe(
        'Set by a campaign for each stage (probe, training, evaluation .judge_mode); leave unset. Unset = legacy, ' +
          "the reference framework's default",
      ),
    limits: z
      .object({
        max_agent_turns: z
          .number()
          .int()
          .min(1)
          .nullable()
          .default(null)
          .describe(
            'Agent actions per episode when the task sets none (visible texts, completions with tool calls, direct ' +
              'responses; reasoning alone is none); null = unlimited, as the reference',
          ),
        max_tokens_per_turn: z
          .number()
          .int()
          .min(1)
          .default(8192)
          .describe('Generation cap per completion (reference: 8192)'),
        episode_token_budget: z
          .number()
          .int()
          .min(1)
          .default(106_496)
          .describe('Tokens per episode after the initial prompt (reference: 106,496)'),
        wall_clock_ms: z
          .number()
          .int()
          .min(1)
          .default(600_000)
          .describe('Whole-episode wall-clock limit (the reference has none)'),
      })
      .strict()
      .prefault({}),
    prompt: z
      .object({
        tools_in_prompt: z
          .boolean()
          .default(true)
          .describe('Describe tools in the system prompt (for chat templates without tool support)'),
        example: z.boolean().default(false).describe('Add a worked tool-call example (helps very small models)'),
      })
      .strict()
      .prefault({}),
    thinkingbox: thinkingboxSettingsSchema,
  })
  .strict();

export type EndpointConfig = z.infer<typeof endpointSchema>;
export type EpisodeConfig = z.infer<typeof episodeConfigSchema>;
export type ThinkingboxSettings = z.infer<typeof thinkingboxSettingsSchema>;

export function toEndpoint(e: EndpointConfig) {
  return { baseUrl: e.base_url, model: e.model, apiKeyEnv: e.api_key_env, timeoutMs: e.timeout_ms };
}

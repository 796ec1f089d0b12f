import { z } from 'zod';

/** Episode settings: endpoints, sampling, simulated user, limits. Validated once; the schema is the type. */

export const endpointSchema = z
  .object({
    base_url: z.string().url().describe('OpenAI-compatible base URL including /v1'),
    model: z.string().min(1).describe('Model name sent with each request'),
    api_key_env: z
      .string()
      .optional()
      .describe('Name of the environment variable holding the API key (read at call time)'),
    timeout_ms: z.number().int().positive().default(300_000).describe('Per-request timeout'),
  })
  .strict();

export const thinkingboxSettingsSchema = z
  .object({
    warm_processes: z
      .number()
      .int()
      .min(0)
      .default(2)
      .describe('Started tool-server processes kept ready per server (imported ThinkingBox tasks)'),
    server_start_timeout_ms: z
      .number()
      .int()
      .min(1)
      .default(30_000)
      .describe('Spawn to MCP initialize; longer is an infrastructure error'),
    test_timeout_ms: z
      .number()
      .int()
      .min(1)
      .default(60_000)
      .describe('Test-code run limit; longer is an infrastructure error'),
    native_grading: z
      .boolean()
      .default(true)
      .describe('Grade the common hash-and-rubrics test body natively instead of in Python'),
  })
  .strict()
  .default({ warm_processes: 2, server_start_timeout_ms: 30_000, test_timeout_ms: 60_000, native_grading: true })
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
    }),
    sampling: z
      .object({
        temperature: z.number().min(0).default(1).describe('Policy sampling temperature'),
        top_p: z.number().gt(0).max(1).default(1),
        seed: z.number().int().optional(),
        stop: z
          .array(z.string())
          .default([])
          .describe(
            'Stop strings (token mode), kept in the output; e.g. ["</tool_call>"] for small models that ramble after a call',
          ),
      })
      .strict()
      .default({ temperature: 1, top_p: 1, stop: [] }),
    user: z
      .discriminatedUnion('mode', [
        z.object({ mode: z.literal('scripted') }).strict(),
        z
          .object({ mode: z.literal('llm'), endpoint: endpointSchema, temperature: z.number().min(0).default(0.3) })
          .strict(),
      ])
      .default({ mode: 'scripted' })
      .describe('Simulated user: scripted replies from the task, or an LLM'),
    judge: endpointSchema.optional().describe('Yes/no rubric judge (required for tasks with rubrics)'),
    limits: z
      .object({
        max_agent_turns: z
          .number()
          .int()
          .min(1)
          .nullable()
          .default(null)
          .describe('Agent completions per episode when the task sets none (null = unlimited, as the reference)'),
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
      .default({
        max_agent_turns: null,
        max_tokens_per_turn: 8192,
        episode_token_budget: 106_496,
        wall_clock_ms: 600_000,
      }),
    prompt: z
      .object({
        tools_in_prompt: z
          .boolean()
          .default(true)
          .describe('Describe tools in the system prompt (for chat templates without tool support)'),
        example: z.boolean().default(false).describe('Add a worked tool-call example (helps very small models)'),
      })
      .strict()
      .default({ tools_in_prompt: true, example: false }),
    thinkingbox: thinkingboxSettingsSchema,
  })
  .strict();

export type EndpointConfig = z.infer<typeof endpointSchema>;
export type EpisodeConfig = z.infer<typeof episodeConfigSchema>;
export type ThinkingboxSettings = z.infer<typeof thinkingboxSettingsSchema>;

export function toEndpoint(e: EndpointConfig) {
  return { baseUrl: e.base_url, model: e.model, apiKeyEnv: e.api_key_env, timeoutMs: e.timeout_ms };
}

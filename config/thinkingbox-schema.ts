import { z } from 'zod';
import { taskLimitsSchema } from './task-schema.ts';

/**
 * ThinkingBox-format datasets (REFERENCE.md section 6): the files users bring (agent, scenario and task YAML,
 * servers.yaml, the test list) and the imported suite `tbt tasks import-thinkingbox` writes. Dataset files are
 * read loosely (unknown keys are kept and reported, never fatal): they come from elsewhere and may carry
 * fields this importer does not use.
 */

const json = z.record(z.string(), z.unknown());

export const agentFileSchema = z.looseObject({
  system_prompt: z.string().min(1).describe('Generic agent system prompt'),
  tools: z.array(z.unknown()).optional().describe('Built-in tools (an end-turn tool); ours is always offered'),
});

export const visibleToolSchema = z.union([
  z.string().min(1),
  z.looseObject({ name: z.string().min(1), description: z.string().optional(), input_schema: json.optional() }),
]);

export const scenarioFileSchema = z.looseObject({
  agent: z.string().min(1).optional().describe('agent/<name>.yaml (default: the only agent, or "default")'),
  world_state: z.record(z.string(), json).describe('server name -> initial config passed to __reserved__init'),
  tools: z.array(visibleToolSchema).min(1).describe('Tool names the agent sees, with optional overrides'),
  bot_instructions: z.string().default('').describe('Domain prompt'),
});

export const historyMessageSchema = z.object({ role: z.enum(['user', 'assistant']), content: z.string() }).strict();

/** The `!` YAML of a test function, after the module defaults are applied. */
export const testCaseYamlSchema = z.looseObject({
  scenario: z.string().min(1),
  query: z.string().min(1),
  user_context: z.string().optional(),
  max_user_sim_turns: z.number().int().min(0).optional(),
  max_agent_sim_turns: z.number().int().min(1).optional(),
  bot_instructions: z.string().optional(),
  init: z.record(z.string(), json).default({}),
  format_query: z.unknown().optional(),
  tags: z.array(z.string()).default([]),
  history: z.array(historyMessageSchema).default([]),
});

export const serverCommandSchema = z.union([
  z.string().min(1).describe('Command line, split on spaces'),
  z
    .object({
      command: z.string().min(1),
      args: z.array(z.string()).default([]),
      env: z.record(z.string(), z.string()).default({}),
      cwd: z.string().optional().describe('Relative to the dataset folder (default: the dataset folder)'),
    })
    .strict(),
]);

export const serversFileSchema = z.object({ servers: z.record(z.string(), serverCommandSchema) }).strict();

export const testListSchema = z.array(
  z.string().regex(/^[^:\s]+\.py:[A-Za-z_][A-Za-z0-9_]*$/, 'expected file.py:function'),
);

/** The recognised common test body: result hash equals golden hash per server, plus the effects' rubrics. */
export const nativeTestPatternSchema = z
  .object({ kind: z.literal('hash_and_rubrics'), servers: z.array(z.string()).min(1), rubrics: z.boolean() })
  .strict();

export const serverSpecSchema = z
  .object({
    command: z.string(),
    args: z.array(z.string()),
    env: z.record(z.string(), z.string()),
    cwd: z.string().describe('Absolute working directory'),
  })
  .strict();

export const importedToolSchema = z
  .object({ name: z.string(), description: z.string().optional(), input_schema: json.optional() })
  .strict();

export const importedScenarioSchema = z
  .object({
    name: z.string(),
    agent_prompt: z.string(),
    bot_instructions: z.string(),
    world_state: z.record(z.string(), json),
    tools: z.array(importedToolSchema),
    file: z.string(),
  })
  .strict();

export const importedTaskSchema = z
  .object({
    uid: z.string(),
    scenario: z.string(),
    query: z.string(),
    user_context: z.string().optional(),
    limits: taskLimitsSchema,
    bot_instructions: z.string().optional(),
    /** The scenario's world_state with the task's `init` merged in: what each server's __reserved__init gets. */
    world_state: z.record(z.string(), json),
    history: z.array(historyMessageSchema),
    tags: z.array(z.string()),
    /** Listed in --exclude-uids: may be evaluated, never trained on. */
    evaluation_only: z.boolean(),
    test: z
      .object({
        file: z.string(),
        function: z.string(),
        line: z.number().int(),
        params: z.array(z.string()),
        native: nativeTestPatternSchema.nullable(),
      })
      .strict(),
    /** Golden tool calls found in init (world_state[server].golden), in the order they are replayed. */
    golden: z.array(z.object({ server: z.string(), tool: z.string(), arguments: json }).strict()),
  })
  .strict();

export const importedSuiteSchema = z
  .object({
    format: z.literal('thinkingbox-import/1'),
    name: z.string(),
    dataset_dir: z.string(),
    servers: z.record(z.string(), serverSpecSchema),
    scenarios: z.record(z.string(), importedScenarioSchema),
    tasks: z.array(importedTaskSchema),
  })
  .strict();

export const IMPORTED_SUITE_FILE = 'thinkingbox-suite.json';

export type ServerSpec = z.infer<typeof serverSpecSchema>;
export type ImportedScenario = z.infer<typeof importedScenarioSchema>;
export type ImportedTask = z.infer<typeof importedTaskSchema>;
export type ImportedSuite = z.infer<typeof importedSuiteSchema>;
export type NativeTestPattern = z.infer<typeof nativeTestPatternSchema>;

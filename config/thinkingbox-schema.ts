import { z } from 'zod';
import { taskLimitsSchema } from './task-schema.ts';

/**
 * ThinkingBox-format datasets (docs/thinkingbox-datasets.md): the files users bring (agent, scenario and task
 * YAML, servers/servers.yaml, the test list) and the imported suite `tbt tasks import-thinkingbox` writes.
 * Dataset files are read loosely (unknown keys are kept and ignored, never fatal): they come from elsewhere and
 * carry fields this importer does not use (`inject_after_user`, `fixtures`, ...).
 */

const json = z.record(z.string(), z.unknown());

/** A framework-handled tool (never sent to a server), e.g. the bench's InjectionAttackInToolResponse. */
export const builtinToolSchema = z.looseObject({
  name: z.string().min(1),
  description: z.string().default(''),
  input_schema: json.default({ type: 'object', properties: {} }),
  is_end_turn: z.boolean().default(false).describe('Calling it ends the episode'),
});

export const agentFileSchema = z.looseObject({
  system_instructions: z.string().min(1).describe('Generic agent system prompt (the <DONE> protocol)'),
  builtin_tools: z
    .array(builtinToolSchema)
    .nullish()
    .transform((v) => v ?? []),
  parallel_tool_calls: z
    .boolean()
    .nullish()
    .transform((v) => v ?? false),
});

export const visibleToolSchema = z.looseObject({
  name: z.string().min(1),
  override_description: z.string().nullish(),
  override_arg_description: z.record(z.string(), z.string()).nullish().describe('argument name -> description'),
  direct_response: z.string().nullish().describe('Answered by the framework with this text; never sent to a server'),
  is_end_turn: z.boolean().nullish(),
});

export const scenarioFileSchema = z.looseObject({
  world_state: z
    .record(z.string(), json.nullable())
    .describe('server name -> initial config passed to __reserved__init'),
  tools: z.array(visibleToolSchema).min(1).describe('Tool names the agent sees, with optional overrides'),
  bot_instructions: z.string().nullish().describe('Domain prompt'),
  tags: z.array(z.string()).nullish(),
});

const messageMetadata = json
  .nullish()
  .transform((v) => v ?? {})
  .describe('Framework flags: tag, is_done, error, ...');

const historyToolCallSchema = z.object({
  T: z.literal('ToolCall'),
  name: z.string().min(1),
  arguments: json.nullish().transform((v) => v ?? {}),
  id: z.string().min(1).optional().describe('Pairs the call with its ToolResponse'),
  metadata: messageMetadata,
});

/**
 * The type a `$history` message without `T` has: the reference validates such a dict against each message type in
 * turn, and the fields it carries decide which one accepts it.
 */
function inferMessageType(raw: unknown): unknown {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || 'T' in raw) return raw;
  const T =
    'tool_calls' in raw ? 'ParallelToolCall' : 'role' in raw ? 'Text' : 'content' in raw ? 'ToolResponse' : 'ToolCall';
  return { T, ...raw };
}

/** A call without an id gets one at import (the reference makes a random one). */
const callId = z.string().min(1).optional();

/** One message of a `$history` conversation (the reference's history and metadata documentation), told apart by `T`. */
export const historyMessageSchema = z.preprocess(
  inferMessageType,
  z.discriminatedUnion('T', [
    z.object({
      T: z.literal('Text'),
      role: z.enum(['system', 'user', 'assistant']),
      content: z.string(),
      metadata: messageMetadata,
    }),
    historyToolCallSchema,
    z.object({
      T: z.literal('ParallelToolCall'),
      tool_calls: z.array(z.preprocess(inferMessageType, historyToolCallSchema)),
      metadata: messageMetadata,
    }),
    z.object({
      T: z.literal('ToolResponse'),
      name: z.string().min(1),
      content: z.string(),
      id: callId,
      metadata: messageMetadata,
    }),
  ]),
);

/** A `$history` message as written: `message_id` marks the ends `history: key:start:end` names. */
export const rawHistoryMessageSchema = z.looseObject({
  T: z.string().optional(),
  message_id: z.string().optional(),
});

/** The `!` YAML of a test function, after the module defaults are applied. */
export const testCaseYamlSchema = z.looseObject({
  scenario: z.string().min(1),
  query: z.string().min(1),
  user_context: z.string().nullish(),
  max_user_sim_turns: z.number().int().min(0).nullish(),
  max_agent_sim_turns: z.number().int().min(1).nullish(),
  bot_instructions: z.string().nullish(),
  init: z.record(z.string(), json.nullable()).nullish(),
  format_query: z.boolean().nullish(),
  tags: z.array(z.string()).nullish(),
  history: z
    .string()
    .regex(/^.+:[^:]*:[^:]*$/, "expected 'key:start:end' (start: an index or a message_id; end: a message_id or empty)")
    .nullish()
    .describe('Earlier turns: conversation `key` of $history in <file>.meta.yaml, from start to before end'),
});

/**
 * `<stem>.meta.yaml` beside a test file. Only `$history` is read; a group whose key starts with `#` or whose value is
 * null is skipped, as the reference skips it. Messages are checked when a task takes them (historyMessageSchema).
 */
export const testMetaFileSchema = z.looseObject({
  $history: z
    .record(z.string(), z.unknown())
    .nullish()
    .transform((v) => v ?? {})
    .describe('conversation key -> list of messages (rawHistoryMessageSchema each)'),
});

export const datasetServerSchema = z.discriminatedUnion('type', [
  z.looseObject({
    type: z.literal('mcp-process'),
    command: z.array(z.string().min(1)).min(1).describe('argv; "{python}" is the dataset environment\'s Python'),
    env: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()]).transform(String)).nullish(),
    cwd: z.string().nullish().describe('Relative to servers.yaml (default: its folder)'),
  }),
  z.looseObject({
    type: z.literal('mcp-remote'),
    endpoint: z.string().min(1).describe("The server's URL (the reference's field name; `url` is not read)"),
    transport: z.enum(['sse', 'streamable-http']).default('streamable-http'),
  }),
]);

/** servers.yaml; each entry is checked on its own (datasetServerSchema), so one bad server blocks only itself. */
export const serversFileSchema = z.looseObject({
  use_internal_servers: z
    .boolean()
    .nullish()
    .describe("The reference's default (absent) is true: servers it ships itself, thinkingbox/tools/mcp_<name>.py"),
  servers: z.record(z.string(), z.unknown()),
});

export const testListSchema = z.array(
  z.string().regex(/^[^:\s]+\.py:[A-Za-z_][A-Za-z0-9_]*$/, 'expected file.py:function'),
);

/** The recognised common test body: result hash equals golden hash per server, plus the effects' rubrics. */
export const nativeTestPatternSchema = z
  .object({ kind: z.literal('hash_and_rubrics'), servers: z.array(z.string()).min(1), rubrics: z.boolean() })
  .strict();

/** The placeholder in a server command for the dataset environment's interpreter. */
export const PYTHON_PLACEHOLDER = '{python}';

export const serverSpecSchema = z.discriminatedUnion('transport', [
  z
    .object({
      transport: z.literal('stdio'),
      command: z.string().describe('May be "{python}", resolved when the process starts'),
      args: z.array(z.string()),
      env: z.record(z.string(), z.string()).describe("The dataset's own env from servers.yaml"),
      cwd: z.string().describe('Absolute working directory'),
    })
    .strict(),
  z.object({ transport: z.literal('remote'), url: z.string() }).strict(),
]);

export const importedToolSchema = z
  .object({
    name: z.string(),
    description: z.string().optional(),
    arg_descriptions: z.record(z.string(), z.string()).optional(),
    direct_response: z.string().optional(),
    is_end_turn: z.boolean().optional(),
  })
  .strict();

export const importedBuiltinToolSchema = z
  .object({ name: z.string(), description: z.string(), input_schema: json, is_end_turn: z.boolean() })
  .strict();

export const importedScenarioSchema = z
  .object({
    name: z.string(),
    agent: z.string(),
    agent_prompt: z.string(),
    builtin_tools: z.array(importedBuiltinToolSchema),
    parallel_tool_calls: z.boolean(),
    bot_instructions: z.string(),
    world_state: z.record(z.string(), json.nullable()),
    tools: z.array(importedToolSchema),
    tags: z.array(z.string()),
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
    world_state: z.record(z.string(), json.nullable()),
    /** query, user_context and bot_instructions are `.format(init=<init result>)`-ed when the episode starts. */
    format_query: z.boolean(),
    /** Earlier turns shown before the query; their tool calls are replayed into the servers first. */
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
    /** Golden tool calls (world_state[server].golden_test_case.tool_interactions), in replay order. */
    golden: z.array(z.object({ server: z.string(), tool: z.string(), arguments: json }).strict()),
  })
  .strict();

export const importedSuiteSchema = z
  .object({
    format: z.literal('thinkingbox-import/2'),
    name: z.string(),
    dataset_dir: z.string(),
    /** Server package folders (each with a pyproject.toml) the dataset environment installs. */
    server_packages: z.array(z.string()),
    /** The folder holding dataset/, servers/ and support/ (resolved): THINKINGBOX_DATA of the tool servers. */
    data_root: z.string().optional().describe('THINKINGBOX_DATA of the tool servers; absent: not set'),
    servers: z.record(z.string(), serverSpecSchema),
    scenarios: z.record(z.string(), importedScenarioSchema),
    tasks: z.array(importedTaskSchema),
  })
  .strict();

export const IMPORTED_SUITE_FILE = 'thinkingbox-suite.json';

export type ServerSpec = z.infer<typeof serverSpecSchema>;
export type StdioServerSpec = Extract<ServerSpec, { transport: 'stdio' }>;
export type ImportedScenario = z.infer<typeof importedScenarioSchema>;
export type ImportedTask = z.infer<typeof importedTaskSchema>;
export type ImportedSuite = z.infer<typeof importedSuiteSchema>;
export type NativeTestPattern = z.infer<typeof nativeTestPatternSchema>;
export type HistoryMessage = z.infer<typeof historyMessageSchema>;

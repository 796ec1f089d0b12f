import { z } from 'zod';
import { compileNamedSql } from '../core/named-sql.ts';

/**
 * The native task format: the one source of truth for scenario and task files (YAML) and their types.
 * JSON Schema for editors is exported from these by `tbt tasks schema`.
 */

const identifier = z
  .string()
  .regex(/^[a-z][a-z0-9_]*$/, 'must be lower_snake_case (a-z, 0-9, _), starting with a letter');
const sqlText = z.string().trim().min(1, 'must not be empty');

const jsonSchemaProperty: z.ZodType<Record<string, unknown>> = z.record(z.string(), z.unknown());

export const toolInputSchema = z
  .object({
    type: z.literal('object').describe('Tool arguments are always an object'),
    properties: z.record(identifier, jsonSchemaProperty).default({}).describe('JSON Schema of each argument'),
    required: z.array(z.string()).default([]).describe('Names of required arguments'),
    additionalProperties: z.boolean().optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    for (const [i, name] of s.required.entries()) {
      if (!(name in s.properties))
        ctx.addIssue({
          code: 'custom',
          path: ['required', i],
          message: `'${name}' is required but not declared in properties`,
        });
    }
  });

export const toolSchema = z
  .object({
    name: identifier.describe('Tool name the agent calls'),
    description: z.string().min(1).describe('What the tool does, shown to the agent'),
    input_schema: toolInputSchema,
    sql: z
      .union([sqlText, z.array(sqlText).min(1)])
      .describe(
        'Handler: one statement or a list run in one transaction on the episode database. `:name` binds argument ' +
          '`name` as a parameter (never spliced into the text); missing optional arguments bind NULL.',
      ),
    result: z
      .enum(['rows', 'row', 'affected'])
      .default('rows')
      .describe('What the last statement returns to the agent: all rows, the first row, or the affected-row count'),
    empty_error: z
      .string()
      .optional()
      .describe(
        'If set, a last statement that returns or affects no rows is an error with this text (and the transaction ' +
          'rolls back)',
      ),
  })
  .strict()
  .superRefine((t, ctx) => {
    const statements = Array.isArray(t.sql) ? t.sql : [t.sql];
    for (const name of statements.flatMap((sql) => compileNamedSql(sql).names)) {
      if (!(name in t.input_schema.properties))
        ctx.addIssue({
          code: 'custom',
          path: ['sql'],
          message: `parameter :${name} is not an argument declared in input_schema.properties`,
        });
    }
  });

export const exampleExchangeSchema = z
  .object({
    user: z.string().min(1).describe('What the user asks'),
    calls: z
      .array(z.object({ tool: identifier, arguments: z.record(z.string(), z.unknown()).default({}) }).strict())
      .describe('The tool calls a good agent makes'),
    reply: z.string().min(1).describe("The agent's final message"),
  })
  .strict();

export const scenarioSchema = z
  .object({
    name: identifier.describe('Scenario name, unique within its suite; tasks refer to it'),
    domain: z
      .string()
      .min(1)
      .optional()
      .describe('Business domain for per-domain reports (default: the scenario name)'),
    description: z.string().optional(),
    instructions: z
      .string()
      .min(1)
      .describe('Domain policy the agent must follow (appended to the agent system prompt)'),
    schema: sqlText.describe('Postgres DDL; every table needs a primary key'),
    seed: z.string().default('').describe('SQL that fills the initial state'),
    volatile: z
      .record(identifier, z.array(identifier))
      .default({})
      .describe('table -> columns excluded from state comparison (timestamps, free text)'),
    tools: z.array(toolSchema).min(1).describe('Tools exposed to the agent over MCP'),
    examples: z
      .array(exampleExchangeSchema)
      .default([])
      .describe(
        'Worked exchanges shown before the task when prompt.example is on (for very small models); use values no ' +
          'task uses',
      ),
  })
  .strict()
  .superRefine((s, ctx) => {
    for (const [i, e] of s.examples.entries()) {
      for (const [j, c] of e.calls.entries()) {
        if (!s.tools.some((t) => t.name === c.tool))
          ctx.addIssue({
            code: 'custom',
            path: ['examples', i, 'calls', j, 'tool'],
            message: `unknown tool '${c.tool}'`,
          });
      }
    }
    const seen = new Set<string>();
    for (const [i, t] of s.tools.entries()) {
      if (seen.has(t.name))
        ctx.addIssue({ code: 'custom', path: ['tools', i, 'name'], message: `duplicate tool name '${t.name}'` });
      seen.add(t.name);
    }
  });

export const toolCallSchema = z
  .object({
    tool: identifier.describe('Tool name'),
    arguments: z.record(z.string(), z.unknown()).default({}).describe('Arguments, already typed'),
  })
  .strict();

export const assertionSchema = z
  .object({
    name: z.string().min(1).describe('What the assertion checks, shown when it fails'),
    sql: sqlText.describe('A read-only query returning one row whose first column is true when the check passes'),
  })
  .strict();

export const taskLimitsSchema = z
  .object({
    max_user_turns: z.number().int().min(0).default(10).describe('Simulated-user replies before the episode ends'),
    max_agent_turns: z
      .number()
      .int()
      .min(1)
      .nullable()
      .default(null)
      .describe(
        "Agent actions before the episode ends, as the reference counts them: a visible text, a completion's tool " +
          'calls, a direct response (null = unlimited)',
      ),
  })
  .strict();

export const taskSchema = z
  .object({
    uid: z
      .string()
      .regex(/^[A-Za-z0-9_.:/#-]+$/, 'may contain letters, digits and _ . : / # - only')
      .describe('Stable task id'),
    scenario: identifier.describe('Scenario name within the same suite'),
    query: z.string().min(1).describe("The user's first message"),
    user_context: z
      .string()
      .optional()
      .describe('Private facts the simulated user may reveal; absent = the episode ends after the first agent turn'),
    user_replies: z.array(z.string()).optional().describe('Scripted user replies, in order (scripted user mode)'),
    data_patch: z.string().optional().describe('SQL applied to the fresh database before the episode'),
    golden: z
      .array(toolCallSchema)
      .describe('Golden tool-call trajectory; its replay defines the expected terminal state'),
    rubrics: z
      .array(z.string().min(1))
      .default([])
      .describe('Yes/no questions about the last visible assistant message, asked of the judge'),
    assertions: z.array(assertionSchema).default([]).describe('Extra SQL checks on the terminal state'),
    limits: taskLimitsSchema.prefault({}),
    tags: z.array(z.string()).default([]),
  })
  .strict();

export const taskFileSchema = z.object({ tasks: z.array(taskSchema).min(1) }).strict();

export type ToolDefinition = z.infer<typeof toolSchema>;
export type Scenario = z.infer<typeof scenarioSchema>;
export type ToolCall = z.infer<typeof toolCallSchema>;
export type Task = z.infer<typeof taskSchema>;
export type Assertion = z.infer<typeof assertionSchema>;

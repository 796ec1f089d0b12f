import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import pg from 'pg';
import type { Scenario } from '../config/task-schema.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../core/errors.ts';
import { referenceToolSchema } from '../core/reference-tool-schema.ts';
import type { Sandbox } from '../sandbox/sandbox-pool.ts';
import { runSqlTool, ToolCallError } from '../sandbox/sql-tool.ts';

/**
 * One MCP session per episode: an MCP server exposing the scenario's tools bound to this episode's
 * sandbox (and nothing else), and the MCP client the agent loop talks to. Tool mistakes come back as
 * `isError` results the agent can read; a failing database surfaces as an InfrastructureError.
 */

export interface ToolResult {
  text: string;
  isError: boolean;
}
export interface ToolSpec {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  /**
   * A dataset's `is_end_turn` tool: a completion calling it ends the episode and none of that completion's calls
   * run, so the loop must know before calling anything.
   */
  endsTurn?: boolean;
}

export interface ToolSession {
  listTools(): Promise<ToolSpec[]>;
  callTool(name: string, args: Record<string, unknown>): Promise<ToolResult>;
  close(): Promise<void>;
}

/**
 * A tool as an MCP server lists it, in the form the agent is offered it: its input schema converted as the
 * reference's MCP client converts every listed tool (core/reference-tool-schema.ts), before any override.
 */
export function listedToolSpec(
  tool: { name: string; description?: string; inputSchema: Record<string, unknown> },
  server: string,
): ToolSpec {
  try {
    return { name: tool.name, description: tool.description ?? '', inputSchema: referenceToolSchema(tool.inputSchema) };
  } catch (err) {
    if (!(err instanceof BadInputError)) throw err;
    throw new BadInputError(`tool server '${server}': tool '${tool.name}': input schema: ${err.message}`, {
      cause: err,
    });
  }
}

/** An MCP tool result as the agent reads it: its text parts, one per line. */
export function toolResultText(result: Record<string, unknown>): string {
  return ((result.content ?? []) as { type: string; text?: string }[]).map((c) => c.text ?? '').join('\n');
}

const INFRASTRUCTURE = -32099; // JSON-RPC server-error range: the backend, not the call, failed

export async function openToolSession(
  scenario: Scenario,
  sandbox: Sandbox,
  options: { statementTimeoutMs?: number } = {},
): Promise<ToolSession> {
  const db = new pg.Client({ connectionString: sandbox.agentUrl, connectionTimeoutMillis: 10_000 });
  db.on('error', () => undefined); // surfaced by the next query instead of crashing the process
  try {
    await db.connect();
    await db.query(`SET statement_timeout = ${Math.trunc(options.statementTimeoutMs ?? 10_000)}`);
  } catch (err) {
    await db.end().catch(() => undefined);
    throw new InfrastructureError(`cannot connect to sandbox ${sandbox.name}: ${errorMessage(err)}`, { cause: err });
  }

  const server = new Server({ name: `tbt-${scenario.name}`, version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: scenario.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.input_schema })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const tool = scenario.tools.find((t) => t.name === request.params.name);
    if (!tool) {
      return {
        isError: true,
        content: [
          {
            type: 'text',
            text:
              `Error: unknown tool '${request.params.name}'. Available tools: ` +
              `${scenario.tools.map((t) => t.name).join(', ')}`,
          },
        ],
      };
    }
    try {
      const text = await runSqlTool(db, tool, request.params.arguments ?? {});
      return { content: [{ type: 'text', text }] };
    } catch (err) {
      if (err instanceof ToolCallError)
        return { isError: true, content: [{ type: 'text', text: `Error: ${err.message}` }] };
      throw new McpError(INFRASTRUCTURE as ErrorCode, errorMessage(err));
    }
  });

  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  await server.connect(serverTransport);
  const client = new Client({ name: 'tbt-agent-loop', version: '1.0.0' });
  await client.connect(clientTransport);

  return {
    async listTools() {
      const { tools } = await client.listTools();
      return tools.map((t) => listedToolSpec(t, `tbt-${scenario.name}`));
    },
    async callTool(name, args) {
      try {
        const result = await client.callTool({ name, arguments: args });
        return { text: toolResultText(result), isError: result.isError === true };
      } catch (err) {
        throw new InfrastructureError(`tool ${name}: ${errorMessage(err)}`, { cause: err });
      }
    },
    async close() {
      await client.close().catch(() => undefined);
      await server.close().catch(() => undefined);
      await db.end().catch(() => undefined);
    },
  };
}

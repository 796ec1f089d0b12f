import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { InfrastructureError, errorMessage } from '../../core/errors.ts';
import { toolResultText, type ToolResult, type ToolSession } from '../../rollout/mcp-tool-session.ts';
import type { ToolRoute } from './episode-tool-routes.ts';

/**
 * The agent's tool session of a ThinkingBox episode: each call goes where its route says. An unknown tool is
 * an error the agent sees; a server that fails or does not answer in time is an infrastructure error. The
 * direct responses given are kept, in order, for the test's `x.tool_direct_responses`.
 */
export function routedToolSession(
  routes: Map<string, ToolRoute>,
  toolTimeoutMs: number,
): { tools: ToolSession; directResponses: string[] } {
  const directResponses: string[] = [];
  const tools: ToolSession = {
    async listTools() {
      return [...routes.values()].map((r) => r.spec);
    },
    async callTool(name, args): Promise<ToolResult> {
      const target = routes.get(name);
      if (!target) return { text: `Error: function '${name}' does not exist`, isError: true };
      if (target.kind === 'builtin') return { text: '', isError: false, endTurn: target.endTurn };
      if (target.kind === 'direct') {
        directResponses.push(target.text);
        return { text: target.text, isError: false, endTurn: target.endTurn };
      }
      try {
        const result = await target.server.client.callTool({ name, arguments: args }, CallToolResultSchema, {
          timeout: toolTimeoutMs,
        });
        return { text: toolResultText(result), isError: result.isError === true, endTurn: target.endTurn };
      } catch (err) {
        throw new InfrastructureError(`tool server '${target.server.name}': ${name} failed: ${errorMessage(err)}`, {
          cause: err,
        });
      }
    },
    async close() {},
  };
  return { tools, directResponses };
}

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { InfrastructureError, errorMessage } from '../../core/errors.ts';
import type { EnvironmentToolResult } from '../../rollout/episode-environment.ts';
import { toolResultText, type ToolSession } from '../../rollout/mcp-tool-session.ts';
import type { ToolRoute } from './episode-tool-routes.ts';
import { FormatError, formatPython } from './python-format.ts';

/**
 * The agent's tool session of a ThinkingBox episode: each call goes where its route says. An unknown tool is
 * an error the agent sees; a server that fails or does not answer in time is an infrastructure error. A
 * `direct_response` tool's template is filled from its JSON result (the direct response, shown as an assistant
 * message after the results); those given are kept, in order, for the test's `x.tool_direct_responses`. An
 * end-turn tool is listed as one (`endsTurn`): the loop never calls it.
 */

/** What the reference answers a direct_response tool whose result does not fill its template. */
export const DIRECT_RESPONSE_ERROR = 'Error in function execution';

/** The template filled from the result, as the reference does: `template.format(**json.loads(result))`. */
export function directResponseOf(template: string, result: string): string | undefined {
  let fields: unknown;
  try {
    fields = JSON.parse(result);
  } catch {
    return undefined;
  }
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields)) return undefined;
  try {
    return formatPython(template, fields as Record<string, unknown>);
  } catch (err) {
    if (err instanceof FormatError) return undefined;
    throw err;
  }
}

export function routedToolSession(
  routes: Map<string, ToolRoute>,
  toolTimeoutMs: number,
  directResponses: string[] = [],
): { tools: ToolSession; directResponses: string[] } {
  const tools: ToolSession = {
    async listTools() {
      return [...routes.values()].map((r) => (r.endTurn ? { ...r.spec, endsTurn: true } : r.spec));
    },
    async callTool(name, args): Promise<EnvironmentToolResult> {
      const target = routes.get(name);
      if (!target) return { text: `Error: function '${name}' does not exist`, isError: true };
      if (target.kind === 'builtin') return { text: '', isError: false };
      let text: string;
      let isError: boolean;
      try {
        const result = await target.server.client.callTool({ name, arguments: args }, CallToolResultSchema, {
          timeout: toolTimeoutMs,
        });
        text = toolResultText(result);
        isError = result.isError === true;
      } catch (err) {
        throw new InfrastructureError(`tool server '${target.server.name}': ${name} failed: ${errorMessage(err)}`, {
          cause: err,
        });
      }
      if (target.directResponse === undefined) return { text, isError };
      const direct = directResponseOf(target.directResponse, text);
      if (direct === undefined) return { text: DIRECT_RESPONSE_ERROR, isError: true };
      directResponses.push(direct);
      return { text, isError, directResponse: direct };
    },
    async close() {},
  };
  return { tools, directResponses };
}

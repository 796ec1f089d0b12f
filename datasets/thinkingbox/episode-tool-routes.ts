import type { ImportedScenario } from '../../config/thinkingbox-schema.ts';
import { BadInputError } from '../../core/errors.ts';
import { listedToolSpec, type ToolSpec } from '../../rollout/mcp-tool-session.ts';
import { RESERVED } from './reserved-tools.ts';
import type { StartedServer } from './stdio-server-pool.ts';

/**
 * The tools of one episode as the agent sees them, and where a call of each goes: the agent's builtin tools
 * (answered empty) and the scenario's visible tools (called on the server that offers them; one with a
 * `direct_response` template also gets that template filled from its JSON result, shown as an assistant message).
 * A server tool the scenario does not make visible is not offered; a visible tool no server offers is the
 * scenario's error.
 */

export type ToolRoute =
  | { kind: 'server'; server: StartedServer; spec: ToolSpec; endTurn: boolean; directResponse?: string }
  | { kind: 'builtin'; spec: ToolSpec; endTurn: boolean };

interface OfferedTool {
  server: StartedServer;
  spec: ToolSpec;
}

/**
 * A tool as the agent sees it: the server's converted schema with the scenario's overrides applied, as the
 * reference applies them after its conversion (so an argument whose schema was a `$ref` keeps its new description).
 * An argument description for a name the schema does not declare is ignored, as the reference ignores it (with a
 * warning): it never adds an argument.
 */
function visibleSpec(offered: ToolSpec | undefined, visible: ImportedScenario['tools'][number]): ToolSpec {
  const base = offered ?? { name: visible.name, description: '', inputSchema: { type: 'object', properties: {} } };
  let inputSchema = base.inputSchema;
  const declared = inputSchema.properties;
  if (visible.arg_descriptions && typeof declared === 'object' && declared !== null) {
    const properties = { ...(declared as Record<string, Record<string, unknown>>) };
    for (const [arg, description] of Object.entries(visible.arg_descriptions))
      if (Object.hasOwn(properties, arg)) properties[arg] = { ...properties[arg], description };
    inputSchema = { ...inputSchema, properties };
  }
  return { name: visible.name, description: visible.description ?? base.description, inputSchema };
}

/** The servers' own tools by name (the first server to offer a name has it; reserved tools left out). */
async function offeredTools(servers: StartedServer[], timeoutMs: number): Promise<Map<string, OfferedTool>> {
  const offered = new Map<string, OfferedTool>();
  for (const server of servers) {
    const { tools } = await server.client.listTools(undefined, { timeout: timeoutMs });
    for (const t of tools) {
      // Converted before the filters: the reference converts every tool a server lists, reserved ones included.
      const spec = listedToolSpec(t, server.name);
      if (t.name.startsWith(RESERVED) || offered.has(t.name)) continue;
      offered.set(t.name, { server, spec });
    }
  }
  return offered;
}

/** The episode's routes by tool name, builtin tools first, then the visible tools in the scenario's order. */
export async function episodeToolRoutes(
  scenario: ImportedScenario,
  servers: StartedServer[],
  serverNames: string[],
  timeoutMs: number,
): Promise<Map<string, ToolRoute>> {
  const offered = await offeredTools(servers, timeoutMs);
  const route = new Map<string, ToolRoute>();
  for (const b of scenario.builtin_tools)
    route.set(b.name, {
      kind: 'builtin',
      spec: { name: b.name, description: b.description, inputSchema: b.input_schema },
      endTurn: b.is_end_turn,
    });
  for (const visible of scenario.tools) {
    const found = offered.get(visible.name);
    const spec = visibleSpec(found?.spec, visible);
    const endTurn = visible.is_end_turn === true;
    if (!found)
      throw new BadInputError(
        `scenario ${scenario.name} (${scenario.file}): visible tool '${visible.name}' is not offered by its ` +
          `servers (${serverNames.join(', ')})`,
      );
    const direct = visible.direct_response !== undefined ? { directResponse: visible.direct_response } : {};
    route.set(visible.name, { kind: 'server', server: found.server, spec, endTurn, ...direct });
  }
  return route;
}

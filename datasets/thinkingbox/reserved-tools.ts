import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ImportedTask } from '../../config/thinkingbox-schema.ts';
import type { StateDifference } from '../../core/canonical-state.ts';
import { InfrastructureError, errorMessage } from '../../core/errors.ts';
import type { StartedServer } from './stdio-server-pool.ts';

/**
 * The reserved tools a ThinkingBox tool server offers besides its own, which the agent never sees:
 * `__reserved__init` seeds the server with its part of the task's world_state, `__reserved__geteffects` reports
 * the terminal state for grading, and `__reserved__teardown` ends the episode. Each answers JSON as text.
 */

export const RESERVED = '__reserved__';

/** A server's effects, as `__reserved__geteffects` returns them (only the fields grading reads are typed). */
export interface ServerEffects {
  result_db_hash?: string;
  golden_db_hash?: string;
  diff?: StateDifference[];
  rubrics_yesno?: string[];
  [key: string]: unknown;
}

export async function callReserved(
  server: StartedServer,
  tool: string,
  args: Record<string, unknown>,
  timeoutMs: number,
): Promise<unknown> {
  let result;
  try {
    result = await server.client.callTool({ name: `${RESERVED}${tool}`, arguments: args }, CallToolResultSchema, {
      timeout: timeoutMs,
    });
  } catch (err) {
    const tail = server.stderrTail();
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} failed: ${errorMessage(err)}${tail ? `; stderr: ${tail}` : ''}`,
      { cause: err },
    );
  }
  // Joined without separators: a JSON answer may come in several text parts.
  const text = (result.content as { type: string; text?: string }[]).map((c) => c.text ?? '').join('');
  if (result.isError)
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} returned an error: ${text.slice(0, 500)}`,
    );
  try {
    return text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new InfrastructureError(
      `tool server '${server.name}': ${RESERVED}${tool} did not return JSON: ${text.slice(0, 200)}`,
    );
  }
}

/**
 * `__reserved__init` of every server (together) with its part of the merged world_state: what each answered
 * besides `status`, by server (the `init` of a format_query task and of `x.init_result`).
 */
export async function initServers(
  servers: StartedServer[],
  worldState: ImportedTask['world_state'],
  timeoutMs: number,
): Promise<Record<string, unknown>> {
  const initResult: Record<string, unknown> = {};
  await Promise.all(
    servers.map(async (s) => {
      const answer = await callReserved(s, 'init', { config: worldState[s.name] ?? {} }, timeoutMs);
      const ok =
        typeof answer === 'object' &&
        answer !== null &&
        !Array.isArray(answer) &&
        (Object.keys(answer).length === 0 || (answer as { status?: unknown }).status === 'ok');
      if (!ok)
        throw new InfrastructureError(
          `tool server '${s.name}': __reserved__init did not return {} or {"status": "ok"}: ` +
            `${JSON.stringify(answer).slice(0, 500)}`,
        );
      const { status: _status, ...rest } = answer as Record<string, unknown>;
      initResult[s.name] = rest;
    }),
  );
  return initResult;
}

/** `__reserved__geteffects` of every server, one after another, by server. */
export async function serverEffects(
  servers: StartedServer[],
  timeoutMs: number,
): Promise<Record<string, ServerEffects>> {
  const effects: Record<string, ServerEffects> = {};
  for (const server of servers)
    effects[server.name] = (await callReserved(server, 'geteffects', {}, timeoutMs)) as ServerEffects;
  return effects;
}

/**
 * ThinkingBox `init` merge (REFERENCE.md section 6): a task's `init` is merged into its scenario's
 * `world_state` per server: dicts merge recursively, lists concatenate, scalars (and type changes) replace.
 * Inputs are never modified.
 */

type Json = unknown;

function isPlainObject(v: Json): v is Record<string, Json> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function mergeWorldState(base: Json, override: Json): Json {
  if (Array.isArray(base) && Array.isArray(override)) return [...base, ...override];
  if (isPlainObject(base) && isPlainObject(override)) {
    const merged: Record<string, Json> = { ...base };
    for (const [key, value] of Object.entries(override))
      merged[key] = key in base ? mergeWorldState(base[key], value) : value;
    return merged;
  }
  return override;
}

export interface GoldenCall {
  server: string;
  tool: string;
  arguments: Record<string, unknown>;
}

/**
 * The golden tool calls a dataset keeps in `init` (`world_state[server].golden`), server by server in the
 * order the world_state lists its servers. Malformed entries are reported by index, not skipped silently.
 */
export function goldenCallsOf(worldState: Record<string, Json>): { calls: GoldenCall[]; problems: string[] } {
  const calls: GoldenCall[] = [];
  const problems: string[] = [];
  for (const [server, config] of Object.entries(worldState)) {
    if (!isPlainObject(config) || config.golden === undefined) continue;
    if (!Array.isArray(config.golden)) {
      problems.push(`world_state.${server}.golden must be a list of {tool, arguments}`);
      continue;
    }
    for (const [i, call] of config.golden.entries()) {
      if (
        !isPlainObject(call) ||
        typeof call.tool !== 'string' ||
        (call.arguments !== undefined && !isPlainObject(call.arguments))
      ) {
        problems.push(`world_state.${server}.golden[${i}] must be {tool: name, arguments: {...}}`);
        continue;
      }
      calls.push({ server, tool: call.tool, arguments: (call.arguments as Record<string, unknown> | undefined) ?? {} });
    }
  }
  return { calls, problems };
}

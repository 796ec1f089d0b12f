/**
 * ThinkingBox `init` merge: a task's `init` is merged into its scenario's `world_state` per server: dicts
 * merge recursively, lists concatenate, scalars and None replace, and a falsy scenario value (None, "", 0,
 * false, an empty list or dict) is replaced outright. Inputs are never modified.
 */

type Json = unknown;

function isPlainObject(v: Json): v is Record<string, Json> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Python truthiness of a JSON value (empty containers, "", 0, false and null are falsy). */
function isFalsy(v: Json): boolean {
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.keys(v).length === 0;
  return !v;
}

export function mergeWorldState(base: Json, override: Json): Json {
  if (isFalsy(base)) return override;
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
 * The golden tool calls a task keeps in `init` (`world_state[server].golden_test_case.tool_interactions`, each
 * `{tool, parameters}`), server by server in world_state order. The server replays them itself to compute the
 * golden state; we replay them through the agent's tool session to validate a task. Malformed entries are
 * reported by index, not skipped silently.
 */
/** Whether any server's world state declares a golden trajectory (`golden_test_case.tool_interactions`, even empty). */
export function declaresGolden(worldState: Record<string, Json>): boolean {
  return Object.values(worldState).some(
    (config) =>
      isPlainObject(config) &&
      isPlainObject(config.golden_test_case) &&
      config.golden_test_case.tool_interactions != null,
  );
}

export function goldenCallsOf(worldState: Record<string, Json>): { calls: GoldenCall[]; problems: string[] } {
  const calls: GoldenCall[] = [];
  const problems: string[] = [];
  for (const [server, config] of Object.entries(worldState)) {
    if (!isPlainObject(config) || config.golden_test_case == null) continue;
    const where = `world_state.${server}.golden_test_case`;
    const golden = config.golden_test_case;
    const list = isPlainObject(golden) ? golden.tool_interactions : undefined;
    if (list == null) continue;
    if (!Array.isArray(list)) {
      problems.push(`${where}.tool_interactions must be a list of {tool, parameters}`);
      continue;
    }
    for (const [i, call] of list.entries()) {
      if (
        !isPlainObject(call) ||
        typeof call.tool !== 'string' ||
        (call.parameters != null && !isPlainObject(call.parameters))
      ) {
        problems.push(`${where}.tool_interactions[${i}] must be {tool: name, parameters: {...}}`);
        continue;
      }
      calls.push({ server, tool: call.tool, arguments: (call.parameters as Record<string, unknown> | null) ?? {} });
    }
  }
  return { calls, problems };
}

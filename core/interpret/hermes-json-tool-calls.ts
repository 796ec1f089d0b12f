import type { ParsedCall } from './types.ts';

/**
 * Hermes-style JSON tool calls (Qwen3, Qwen3-2507), the body of one `<tool_call>` block:
 * `{"name": NAME, "arguments": {...}}`. `arguments` may also be a JSON string holding the object (some
 * models double-encode it); a missing `arguments` means none.
 */

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The `"name"` of a possibly broken or truncated JSON call, or '' when there is none. */
export function recoverHermesName(body: string): string {
  const quoted = /"name"\s*:\s*("(?:[^"\\\n]|\\.)*")/.exec(body)?.[1];
  if (quoted === undefined) return '';
  try {
    const name: unknown = JSON.parse(quoted);
    return typeof name === 'string' ? name : '';
  } catch {
    return '';
  }
}

export function parseHermesJsonCall(body: string): ParsedCall {
  const text = body.trim();
  const fail = (problem: string, name = recoverHermesName(text)): ParsedCall => ({
    ok: false,
    name,
    error: `malformed JSON tool call: ${problem}`,
  });
  if (text === '') return fail('the <tool_call> block is empty');
  let call: unknown;
  try {
    call = JSON.parse(text);
  } catch (error) {
    return fail(`invalid JSON (${errorText(error)})`);
  }
  if (!isRecord(call)) return fail('expected an object {"name": ..., "arguments": {...}}');
  const { name } = call;
  if (typeof name !== 'string' || name === '') return fail('"name" is missing or not a non-empty string', '');
  return parseArgumentsValue(call.arguments, name);
}

/** Accepts an arguments object, or a JSON string that holds one. */
export function parseArgumentsValue(value: unknown, name: string): ParsedCall {
  if (value === undefined) return { ok: true, name, arguments: {} };
  if (isRecord(value)) return { ok: true, name, arguments: value };
  if (typeof value === 'string') return parseArgumentsJson(value, name);
  return {
    ok: false,
    name,
    error: `malformed JSON tool call: "arguments" must be an object, got ${JSON.stringify(value)}`,
  };
}

/** Parses a JSON arguments string; an empty or blank string means no arguments. */
export function parseArgumentsJson(json: string, name: string): ParsedCall {
  if (json.trim() === '') return { ok: true, name, arguments: {} };
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    return { ok: false, name, error: `malformed JSON tool call: "arguments" is not valid JSON (${errorText(error)})` };
  }
  if (!isRecord(value)) {
    return {
      ok: false,
      name,
      error: `malformed JSON tool call: "arguments" must be a JSON object, got ${json.trim()}`,
    };
  }
  return { ok: true, name, arguments: value };
}

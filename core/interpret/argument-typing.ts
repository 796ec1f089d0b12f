import { NOT_PARSED, pythonFiniteFloat, pythonInt, pythonJson, pythonStrip, type Parsed } from './python-literals.ts';

/**
 * Types tool-call arguments from the tool's JSON Schema as vLLM's Qwen3 XML tool parser does (`qwen3_xml` /
 * `qwen3_coder`: `extract_types_from_schema` and `coerce_to_schema_type` in vllm/tool_parsers/utils.py), so a call
 * read here from raw text (training) gets the arguments evaluation gets from vLLM (docs/reference-rules.md §4;
 * test/unit/vllm-qwen3-xml-parity.test.ts checks it against vLLM's own output).
 *
 * Declared types of a property: its `type` (a name or a list), the types of its `enum` values, and those of its
 * `anyOf`/`oneOf`/`allOf` members, all together; names are trimmed, lower-cased and de-aliased ("int", "float",
 * "bool", "dict", "list", ...); none at all means "string". A string value is converted by the first of these that
 * is declared and parses, in this order:
 *   null ("null", any case) > integer (Python `int()`) > number (Python `float()`, finite) > boolean (true/1,
 *   false/0, any case, trimmed) > object / array (any JSON value) > string (kept as it is).
 * With "string" not declared and nothing parsed, the text is read as JSON if it is JSON, else kept.
 * vLLM converts once; a JSON string literal ("\"5\"" for an integer) then comes back as text that would convert
 * again. Here conversion repeats until the value stops changing, because the evaluation path types vLLM's output
 * once more: both paths then agree, and typing typed arguments changes nothing.
 * Only string values are converted; names missing from `properties` are left alone.
 */

const TYPE_PRIORITY = ['null', 'integer', 'number', 'boolean', 'object', 'array', 'string'] as const;

const TYPE_ALIASES: Readonly<Record<string, string>> = {
  str: 'string',
  text: 'string',
  varchar: 'string',
  char: 'string',
  enum: 'string',
  int: 'integer',
  int32: 'integer',
  int64: 'integer',
  uint: 'integer',
  uint32: 'integer',
  uint64: 'integer',
  long: 'integer',
  short: 'integer',
  unsigned: 'integer',
  float: 'number',
  float32: 'number',
  float64: 'number',
  double: 'number',
  bool: 'boolean',
  dict: 'object',
  arr: 'array',
  list: 'array',
  sequence: 'array',
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The JSON type of an enum value. A JSON number written "1.0" is an integer here (Python sees a float). */
function enumValueType(value: unknown): string | undefined {
  if (value === null) return 'null';
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (typeof value === 'string') return 'string';
  if (Array.isArray(value)) return 'array';
  return isRecord(value) ? 'object' : undefined;
}

function collectTypes(schema: unknown, into: Set<string>): void {
  if (!isRecord(schema)) {
    into.add('string');
    return;
  }
  const found = new Set<string>();
  const type = schema.type;
  for (const name of Array.isArray(type) ? type : [type]) if (typeof name === 'string') found.add(name);
  if (Array.isArray(schema.enum)) {
    for (const value of schema.enum) {
      const name = enumValueType(value);
      if (name !== undefined) found.add(name);
    }
  }
  for (const key of ['anyOf', 'oneOf', 'allOf']) {
    const members = schema[key];
    if (Array.isArray(members)) for (const member of members) collectTypes(member, found);
  }
  if (found.size === 0) found.add('string');
  for (const name of found) into.add(name);
}

/** The declared types of one property schema, normalised (trimmed, lower-cased, aliases resolved). */
export function declaredTypes(propertySchema: unknown): Set<string> {
  const raw = new Set<string>();
  collectTypes(propertySchema, raw);
  const types = new Set<string>();
  for (const name of raw) {
    const key = pythonStrip(name).toLowerCase();
    types.add(TYPE_ALIASES[key] ?? key);
  }
  return types;
}

function convertAs(type: (typeof TYPE_PRIORITY)[number], value: string): Parsed {
  switch (type) {
    case 'null':
      return value.toLowerCase() === 'null' ? { ok: true, value: null } : NOT_PARSED;
    case 'integer':
      return pythonInt(value);
    case 'number':
      return pythonFiniteFloat(value);
    case 'boolean': {
      const text = pythonStrip(value.toLowerCase());
      if (text === 'true' || text === '1') return { ok: true, value: true };
      return text === 'false' || text === '0' ? { ok: true, value: false } : NOT_PARSED;
    }
    case 'object':
    case 'array':
      return pythonJson(value);
    case 'string':
      return { ok: true, value };
  }
}

/** One conversion step, vLLM's `coerce_to_schema_type`: the converted value, or the text itself. */
export function convertString(value: string, types: ReadonlySet<string>): unknown {
  for (const type of TYPE_PRIORITY) {
    if (!types.has(type)) continue;
    const converted = convertAs(type, value);
    if (converted.ok) return converted.value;
  }
  const json = pythonJson(value);
  return json.ok ? json.value : value;
}

/** Converts until the value is no longer a changed string (each step decodes a JSON string, so it ends). */
function convertFully(value: string, types: ReadonlySet<string>): unknown {
  let current = value;
  for (;;) {
    const next = convertString(current, types);
    if (typeof next !== 'string' || next === current) return next;
    current = next;
  }
}

export function typeArguments(
  args: Record<string, unknown>,
  schema: Record<string, unknown> | undefined,
): Record<string, unknown> {
  const properties = isRecord(schema?.properties) ? schema.properties : {};
  // fromEntries defines own properties, so an argument named "__proto__" stays an ordinary key.
  return Object.fromEntries(
    Object.entries(args).map(([name, value]) => {
      const property = Object.hasOwn(properties, name) ? properties[name] : undefined;
      if (typeof value !== 'string' || !isRecord(property)) return [name, value];
      return [name, convertFully(value, declaredTypes(property))];
    }),
  );
}

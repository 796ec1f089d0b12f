/**
 * Python's `template.format(**fields)` for a `direct_response` template and the JSON object its tool returned:
 * `{name}`, `{name[key]}` and `{name[0]}` fields, `{{`/`}}` escapes, and values written as Python's `str()` writes
 * them. A field that is missing, positional or uses a conversion or format spec is a FormatError (the reference
 * then answers "Error in function execution").
 */

export class FormatError extends Error {}

/** Python's str() of a JSON value (repr inside containers). */
function pythonStr(value: unknown, nested = false): string {
  if (value === null) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'number')
    return Number.isInteger(value) && !Object.is(value, -0) ? String(value) : floatRepr(value);
  if (typeof value === 'string') return nested ? `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'` : value;
  if (Array.isArray(value)) return `[${value.map((v) => pythonStr(v, true)).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>);
  return `{${entries.map(([k, v]) => `${pythonStr(k, true)}: ${pythonStr(v, true)}`).join(', ')}}`;
}

function floatRepr(n: number): string {
  const s = String(n);
  return /[.e]/.test(s) ? s.replace(/e([+-])(\d)$/, 'e$10$2') : `${s}.0`;
}

function lookup(fields: Record<string, unknown>, field: string): unknown {
  const m = /^([A-Za-z_]\w*)((?:\[[^\]]+\])*)$/.exec(field);
  if (!m) throw new FormatError(`unsupported field '{${field}}'`);
  if (!(m[1]! in fields)) throw new FormatError(`no '${m[1]}' in the tool's result`);
  let value: unknown = fields[m[1]!];
  for (const [, key] of m[2]!.matchAll(/\[([^\]]+)\]/g)) {
    const index = /^\d+$/.test(key!) ? Number(key) : undefined;
    if (Array.isArray(value) && index !== undefined && index < value.length) value = value[index];
    else if (typeof value === 'object' && value !== null && !Array.isArray(value) && key! in value)
      value = (value as Record<string, unknown>)[key!];
    else throw new FormatError(`no [${key}] in '${field}'`);
  }
  return value;
}

export function formatPython(template: string, fields: Record<string, unknown>): string {
  return template.replace(/\{\{|\}\}|\{([^{}]*)\}|[{}]/g, (whole, field: string | undefined) => {
    if (whole === '{{') return '{';
    if (whole === '}}') return '}';
    if (field === undefined) throw new FormatError(`single '${whole}' in the template`);
    return pythonStr(lookup(fields, field));
  });
}

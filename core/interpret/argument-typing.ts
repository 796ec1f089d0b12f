/**
 * Types tool-call arguments from the tool's JSON Schema, exactly as docs/reference-rules.md §4 states.
 *
 * Per argument, the declared types are the property's `type` (a string or a list) or, when it has no
 * `type`, the `type`s of its `anyOf` members. Only a string value whose declared types exclude "string"
 * is converted, after trimming, by the first rule that applies:
 *   1. "boolean" declared and the text is true/false (any case) -> boolean;
 *   2. else "integer" declared -> integer;
 *   3. else "number" declared -> number;
 *   4. else "array" or "object" declared -> parsed JSON;
 *   5. else "null" declared and the text is null/none/empty (any case) -> null.
 * When the rule that applies fails to parse, the original (untrimmed) string is kept and the tool reports
 * the error; no later rule is tried. Our definitions of "parses", which the reference leaves open:
 *   - integer: an optional sign and decimal digits only ("7", "-3", "+007"); "7.0", "1e3", "1_000" and
 *     integers beyond Number.MAX_SAFE_INTEGER stay strings (no silent rounding);
 *   - number: a finite decimal literal with optional fraction and exponent ("1.5", "-.5", "2e-3");
 *     "inf", "nan", "0x10" and "" stay strings;
 *   - array/object: JSON text whose value is of a declared kind ("[1]" for "array", "{}" for "object");
 *     "5" or "\"x\"" for an "array" stays a string, which keeps typing idempotent.
 * Non-string values, names absent from `properties` and properties without declared types are left alone,
 * so typing already-typed arguments changes nothing.
 */

const INTEGER_LITERAL = /^[+-]?\d+$/;
const NUMBER_LITERAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

type Conversion = { ok: true; value: unknown } | { ok: false };

const KEEP: Conversion = { ok: false };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function typeNames(type: unknown): string[] {
  if (typeof type === 'string') return [type];
  if (Array.isArray(type)) return type.filter((t): t is string => typeof t === 'string');
  return [];
}

/** The declared types of one property schema: `type`, or else the member types of `anyOf`. */
export function declaredTypes(propertySchema: unknown): string[] {
  if (!isRecord(propertySchema)) return [];
  if (propertySchema.type !== undefined) return typeNames(propertySchema.type);
  const members = propertySchema.anyOf;
  if (!Array.isArray(members)) return [];
  return members.flatMap((member) => (isRecord(member) ? typeNames(member.type) : []));
}

function parseInteger(text: string): Conversion {
  if (!INTEGER_LITERAL.test(text)) return KEEP;
  const value = Number(text);
  return Number.isSafeInteger(value) ? { ok: true, value: value === 0 ? 0 : value } : KEEP;
}

function parseNumber(text: string): Conversion {
  if (!NUMBER_LITERAL.test(text)) return KEEP;
  const value = Number(text);
  return Number.isFinite(value) ? { ok: true, value: value === 0 ? 0 : value } : KEEP;
}

function parseJsonContainer(text: string, wantArray: boolean, wantObject: boolean): Conversion {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return KEEP;
  }
  if (wantArray && Array.isArray(value)) return { ok: true, value };
  if (wantObject && isRecord(value)) return { ok: true, value };
  return KEEP;
}

/** Converts one string value by the first applicable rule; `ok: false` means keep the raw string. */
export function convertString(value: string, types: readonly string[]): Conversion {
  if (types.length === 0 || types.includes('string')) return KEEP;
  const text = value.trim();
  const lower = text.toLowerCase();
  if (types.includes('boolean') && (lower === 'true' || lower === 'false')) {
    return { ok: true, value: lower === 'true' };
  }
  if (types.includes('integer')) return parseInteger(text);
  if (types.includes('number')) return parseNumber(text);
  const wantArray = types.includes('array');
  const wantObject = types.includes('object');
  if (wantArray || wantObject) return parseJsonContainer(text, wantArray, wantObject);
  if (types.includes('null') && (lower === 'null' || lower === 'none' || lower === '')) {
    return { ok: true, value: null };
  }
  return KEEP;
}

export function typeArguments(
  args: Record<string, unknown>,
  schema: Record<string, unknown> | undefined,
): Record<string, unknown> {
  const properties = isRecord(schema?.properties) ? schema.properties : {};
  // fromEntries defines own properties, so an argument named "__proto__" stays an ordinary key.
  return Object.fromEntries(
    Object.entries(args).map(([name, value]) => {
      const conversion =
        typeof value === 'string' && Object.hasOwn(properties, name)
          ? convertString(value, declaredTypes(properties[name]))
          : KEEP;
      return [name, conversion.ok ? conversion.value : value];
    }),
  );
}

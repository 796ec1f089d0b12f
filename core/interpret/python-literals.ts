/**
 * Python's readings of text that vLLM's argument conversion relies on (`int()`, `float()`, `str.strip()`,
 * `json.loads`), reproduced so that typing here gives what vLLM's tool parser gives for the same text. Where
 * Python and JavaScript differ, Python wins: Unicode whitespace and decimal digits ("١٢", "１２") count, digit
 * groups may be separated by single underscores ("1_000"), and "inf"/"nan" or an overflow are no number.
 * Not reproduced: JSON integers beyond 1e308 (exact in Python, Infinity here: the conversion fails).
 */

export type Parsed = { ok: true; value: unknown } | { ok: false };

export const NOT_PARSED: Parsed = { ok: false };

/** The characters Python's `str.isspace()` accepts, which `str.strip()`, `int()` and `float()` drop at the ends. */
const PYTHON_SPACE = '\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const EDGE_SPACE = new RegExp(`^[${PYTHON_SPACE}]+|[${PYTHON_SPACE}]+$`, 'g');

/** Python's `int()` limit on decimal digits (`sys.int_info.default_max_str_digits`). */
const MAX_INT_DIGITS = 4300;

const DIGITS = String.raw`\d(?:_?\d)*`;
const INT_LITERAL = new RegExp(`^[+-]?${DIGITS}$`);
const FLOAT_LITERAL = new RegExp(`^[+-]?(?:${DIGITS}(?:\\.(?:${DIGITS})?)?|\\.${DIGITS})(?:[eE][+-]?${DIGITS})?$`);
const DECIMAL_DIGIT = /\p{Nd}/u;

export function pythonStrip(text: string): string {
  return text.replace(EDGE_SPACE, '');
}

/**
 * Unicode decimal digits as ASCII. Unicode keeps each script's digits 0-9 in one contiguous run, and adjacent runs
 * are whole sets of ten, so a digit's value is its distance from the start of its run, modulo 10.
 */
function asciiDigits(text: string): string {
  return Array.from(text, (char) => {
    if (char >= '0' && char <= '9') return char;
    if (!DECIMAL_DIGIT.test(char)) return char;
    const code = char.codePointAt(0)!;
    let start = code;
    while (DECIMAL_DIGIT.test(String.fromCodePoint(start - 1))) start -= 1;
    return String((code - start) % 10);
  }).join('');
}

/** Python's `int(text)`: the number, or not parsed (a fraction, an exponent, "0x10", more than 4,300 digits). */
export function pythonInt(text: string): Parsed {
  const literal = asciiDigits(pythonStrip(text));
  if (!INT_LITERAL.test(literal)) return NOT_PARSED;
  const digits = literal.replace(/[+_-]/g, '');
  if (digits.length > MAX_INT_DIGITS) return NOT_PARSED;
  const value = Number(literal.replace(/_/g, ''));
  return { ok: true, value: value === 0 ? 0 : value };
}

/** Python's `float(text)`, kept only when finite (vLLM refuses "inf", "nan" and overflows). */
export function pythonFiniteFloat(text: string): Parsed {
  const literal = asciiDigits(pythonStrip(text));
  if (!FLOAT_LITERAL.test(literal)) return NOT_PARSED;
  const value = Number(literal.replace(/_/g, ''));
  return Number.isFinite(value) ? { ok: true, value: value === 0 ? 0 : value } : NOT_PARSED;
}

function finite(value: unknown): boolean {
  if (typeof value === 'number') return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(finite);
  if (typeof value === 'object' && value !== null) return Object.values(value).every(finite);
  return true;
}

/** Python's `json.loads(text)` where the result can be written back as JSON (no infinite number anywhere in it). */
export function pythonJson(text: string): Parsed {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return NOT_PARSED;
  }
  return finite(value) ? { ok: true, value } : NOT_PARSED;
}

/**
 * Text Postgres can store: `text` refuses NUL (22021) and `jsonb` refuses `\u0000` (22P05) and lone UTF-16
 * surrogates (22P02). A model output, tool result or user reply may hold either, so a finished episode is
 * made storable before it is saved: each such code unit becomes U+FFFD, counted, and nothing else changes.
 */

export const REPLACEMENT = '\uFFFD';

const unstorable = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

export function storableText(text: string): { text: string; replaced: number } {
  let replaced = 0;
  const out = text.replace(unstorable, () => {
    replaced += 1;
    return REPLACEMENT;
  });
  return { text: out, replaced };
}

/** A deep copy of a JSON-like value with every string (object keys too) storable; `replaced` counts changes. */
export function storableValue<T>(value: T): { value: T; replaced: number } {
  let replaced = 0;
  const fix = (s: string) => {
    const r = storableText(s);
    replaced += r.replaced;
    return r.text;
  };
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return fix(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object' && !(v instanceof Date)) {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [fix(k), walk(x)]));
    }
    return v;
  };
  return { value: walk(value) as T, replaced };
}

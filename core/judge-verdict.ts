import { InfrastructureError } from './errors.ts';

/**
 * The reference's yes/no rule: `. , ; :` and newlines become spaces; the answer is yes iff its first or its
 * last whitespace-separated word is "yes" (any case). Anything else, an empty answer included, is no.
 */
export function judgeSaysYes(answer: string): boolean {
  const words = answer
    .replace(/[.,;:\r\n]/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
  return words.length > 0 && (words[0]!.toLowerCase() === 'yes' || words.at(-1)!.toLowerCase() === 'yes');
}

/**
 * JSON double quotes around the keys `answer` and `motivation` when a model wrote them single-quoted or bare (bare
 * only at the start, after `{` or after `,`, so values are left alone): the reference's `_quoted_keys`.
 */
export function quotedKeys(raw: string): string {
  let out = raw;
  for (const key of ['answer', 'motivation']) {
    out = out.replace(new RegExp(`'(${key})'\\s*:`, 'g'), '"$1":');
    out = out.replace(new RegExp(`(?:(?<=\\{)|(?<=,)|^)(\\s*)(${key})(\\s*:)`, 'g'), '$1"$2"$3');
  }
  return out;
}

/**
 * The reference's reading of a motivation-mode answer (`Judge.text_yesno_with_motivation`): JSON once the keys are
 * quoted, its `answer` read by the yes/no rule. A reply that is not JSON is a no ("Failed to parse response"): the
 * judge broke the format, so it is trusted neither way. JSON without a text `answer` makes the reference raise, a
 * system error: here an infrastructure error, never a grade.
 */
export function motivatedJudgeSaysYes(answer: string): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(quotedKeys(answer));
  } catch {
    return false;
  }
  const said = parsed !== null && typeof parsed === 'object' ? (parsed as Record<string, unknown>).answer : undefined;
  if (typeof said !== 'string' || Array.isArray(parsed))
    throw new InfrastructureError(`the judge's motivated answer has no text "answer": ${answer.slice(0, 200)}`);
  return judgeSaysYes(said);
}

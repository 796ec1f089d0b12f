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

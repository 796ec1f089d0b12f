/** The reference's judge rule: the answer counts as yes only if its first or last word is "yes". */
export function judgeSaysYes(answer: string): boolean {
  const words = answer.toLowerCase().match(/[a-z]+/g) ?? [];
  return words[0] === 'yes' || words[words.length - 1] === 'yes';
}

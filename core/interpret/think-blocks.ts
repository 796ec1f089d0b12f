/**
 * Reasoning blocks. A completion may hold several `<think>...</think>` blocks; their contents, each
 * trimmed, non-empty ones joined by a blank line, are the reasoning. Two special cases:
 *   - pre-opened: the chat template already emitted `<think>` in the prompt, so the output starts inside
 *     reasoning and the first `</think>` closes it. Assumed when the caller says so (the template's
 *     generation prompt opens the block: rollout/think-opening.ts), or when the output has a `</think>`
 *     before any `<think>`;
 *   - unclosed: a `<think>` (or a pre-opened block) never closed means the output was truncated while
 *     reasoning, so everything after the opening is reasoning.
 */

export const THINK_OPEN = '<think>';
export const THINK_CLOSE = '</think>';

/**
 * Whether a chat template's generation prompt leaves the model inside an open reasoning block (Qwen3.5's ends with
 * `<think>\n`): `withPrompt` and `withoutPrompt` are one conversation rendered with and without the generation
 * prompt. Only what follows their common beginning is read, so a `<think>` in a message never counts; a template
 * that adds a closed block (`<think>\n\n</think>\n\n`, thinking switched off) does not open one.
 */
export function generationPromptOpensThink(withPrompt: string, withoutPrompt: string): boolean {
  let common = 0;
  while (common < withoutPrompt.length && withPrompt[common] === withoutPrompt[common]) common += 1;
  const added = withPrompt.slice(common);
  const open = added.lastIndexOf(THINK_OPEN);
  return open !== -1 && added.indexOf(THINK_CLOSE, open) === -1;
}

/**
 * Where the pre-opened reasoning ends: the index of its `</think>`, `raw.length` when it never closes,
 * or -1 when the output does not start inside reasoning.
 */
export function preopenedReasoningEnd(raw: string, thinkPreopened: boolean): number {
  const close = raw.indexOf(THINK_CLOSE);
  if (thinkPreopened) return close === -1 ? raw.length : close;
  if (close === -1) return -1;
  const open = raw.indexOf(THINK_OPEN);
  return open === -1 || open > close ? close : -1;
}

export function joinReasoning(parts: readonly string[]): string {
  return parts
    .map((part) => part.trim())
    .filter((part) => part !== '')
    .join('\n\n');
}

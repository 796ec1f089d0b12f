/**
 * Several system messages in one conversation, for chat templates that take only one. ThinkingBox episodes send
 * the agent's system instructions and the domain's bot instructions as two system messages (the reference's
 * layout); some templates (Qwen3.5's) raise on a system message after index 0, so the reference puts a proxy
 * in front of its server that merges them. Whether a policy's template needs it is decided by rendering
 * (rollout/system-message-handling.ts); this file is the merge itself.
 */

/** `merged`: the policy gets one system message; `separate`: it gets them as the conversation has them. */
export type SystemMessageHandling = 'merged' | 'separate';

/**
 * What joins the merged contents: a blank line, as between paragraphs. The reference's proxy is not public; a
 * blank line is how our own prompts join sections (botInstructions joins the scenario's and the test's this way).
 */
export const SYSTEM_MESSAGE_SEPARATOR = '\n\n';

export function systemMessageCount(messages: readonly { role: string }[]): number {
  return messages.filter((m) => m.role === 'system').length;
}

/**
 * One system message first, with every system message's content in order, then the other messages in order.
 * A conversation with at most one system message is returned as it is (the same array).
 */
export function mergeSystemMessages<M extends { role: string; content: string }>(messages: M[]): M[] {
  if (systemMessageCount(messages) <= 1) return messages;
  const systems = messages.filter((m) => m.role === 'system');
  const merged = { ...systems[0]!, content: systems.map((m) => m.content).join(SYSTEM_MESSAGE_SEPARATOR) };
  return [merged, ...messages.filter((m) => m.role !== 'system')];
}

/** The two conversations a template is rendered with to decide: one system message, then two. */
export const SYSTEM_MESSAGE_PROBES = {
  one: [
    { role: 'system' as const, content: 'first' },
    { role: 'user' as const, content: 'hello' },
  ],
  two: [
    { role: 'system' as const, content: 'first' },
    { role: 'system' as const, content: 'second' },
    { role: 'user' as const, content: 'hello' },
  ],
};

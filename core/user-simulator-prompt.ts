/**
 * The simulated user's prompt, rebuilt from scratch every turn (the simulator is stateless). It sees the
 * visible transcript only (no tool calls, no reasoning), its private context, and the last assistant
 * message. Delimiters inside inserted text are escaped so no message can close a section early.
 */

export interface VisibleTurn {
  role: 'user' | 'assistant';
  text: string;
}

export const USER_SIMULATOR_SYSTEM = [
  'You play a customer talking to a support assistant. Stay in character; reply with your next message only.',
  'Rules: use only facts from YOUR CONTEXT or the conversation; never invent names, numbers, dates or details;',
  'if asked for something your context does not contain, say you do not know it; stay on your goal; answer',
  'questions briefly and naturally; do not end the conversation yourself; never mention these instructions.',
].join(' ');

const DELIMITERS = ['<<<', '>>>', '[[', ']]'];

export function escapeDelimiters(text: string): string {
  let out = text;
  for (const d of DELIMITERS) out = out.replaceAll(d, d.split('').join(' '));
  return out;
}

export function buildUserSimulatorPrompt(userContext: string, transcript: VisibleTurn[]): string {
  const lastAssistant = [...transcript].reverse().find((t) => t.role === 'assistant')?.text ?? '';
  const lines = transcript.map(
    (t) => `[[${t.role === 'user' ? 'YOU' : 'ASSISTANT'}]] <<<${escapeDelimiters(t.text)}>>>`,
  );
  return [
    `YOUR CONTEXT (private):\n<<<${escapeDelimiters(userContext)}>>>`,
    `CONVERSATION SO FAR:\n${lines.join('\n')}`,
    `THE ASSISTANT JUST SAID:\n<<<${escapeDelimiters(lastAssistant)}>>>`,
    'Write your next message to the assistant.',
  ].join('\n\n');
}

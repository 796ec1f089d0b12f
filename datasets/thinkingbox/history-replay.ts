import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { HistoryMessage } from '../../config/thinkingbox-schema.ts';
import { errorMessage } from '../../core/errors.ts';
import type { EpisodeHistory } from '../../rollout/episode-environment.ts';
import type { ChatMessage } from '../../rollout/policy-client.ts';
import type { ToolRoute } from './episode-tool-routes.ts';

/**
 * A task's `history` (earlier turns) as the reference uses it: its tool calls replayed, in order, into the freshly
 * seeded servers before the episode, so that their state matches the conversation; then its messages put before
 * the query. Replayed results are not compared with the recorded ones, and a call that fails is a warning (the
 * reference records it in `replay_warnings`), never the episode's end. A call the original run marked with an
 * error, and a call of a builtin tool, is not replayed.
 */

type ToolCallMessage = Extract<HistoryMessage, { T: 'ToolCall' }>;

function callsOf(m: HistoryMessage): ToolCallMessage[] {
  if (m.T === 'ToolCall') return [m];
  if (m.T === 'ParallelToolCall') return m.tool_calls;
  return [];
}

export async function replayHistory(
  history: HistoryMessage[],
  routes: Map<string, ToolRoute>,
  timeoutMs: number,
): Promise<string[]> {
  const warnings: string[] = [];
  for (const call of history.flatMap(callsOf)) {
    if (call.metadata.error) continue;
    const route = routes.get(call.name);
    if (route?.kind === 'builtin') continue;
    const what = `History replay: tool call ${call.name}(${JSON.stringify(call.arguments)}) failed`;
    if (!route) {
      warnings.push(`${what}: Tool ${call.name} does not exist`);
      continue;
    }
    try {
      await route.server.client.callTool({ name: call.name, arguments: call.arguments }, CallToolResultSchema, {
        timeout: timeoutMs,
      });
    } catch (err) {
      warnings.push(`${what}: ${errorMessage(err)}`);
    }
  }
  return warnings;
}

const tagOf = (m: Extract<HistoryMessage, { T: 'Text' }>) =>
  typeof m.metadata.tag === 'string' ? m.metadata.tag : 'text';

function chatCalls(calls: ToolCallMessage[]): NonNullable<ChatMessage['tool_calls']> {
  return calls.map((c) => ({
    ...(c.id ? { id: c.id } : {}),
    type: 'function',
    function: { name: c.name, arguments: JSON.stringify(c.arguments) },
  }));
}

/**
 * The history as the policy sees it (every message, tool calls and results in the chat format, as the reference's
 * chat client encodes them), as the simulated user sees it (visible user and assistant texts), its last reply
 * text, and the direct responses it holds (part of `x.tool_direct_responses`).
 */
export function episodeHistory(history: HistoryMessage[]): EpisodeHistory {
  const out: EpisodeHistory = { messages: [], transcript: [], directResponses: [] };
  for (const m of history) {
    if (m.T === 'Text') {
      out.messages.push({ role: m.role, content: m.content });
      const tag = tagOf(m);
      const shown = m.role !== 'system' && tag !== 'think' && !m.metadata.is_dummy;
      if (shown) out.transcript.push({ role: m.role as 'user' | 'assistant', text: m.content });
      if (tag === 'direct') out.directResponses.push(m.content);
      if (m.role === 'assistant' && tag === 'text' && !m.metadata.is_dummy) out.lastReply = m.content;
    } else if (m.T === 'ToolResponse')
      out.messages.push({ role: 'tool', content: m.content, ...(m.id ? { tool_call_id: m.id } : {}) });
    else out.messages.push({ role: 'assistant', content: '', tool_calls: chatCalls(callsOf(m)) });
  }
  return out;
}

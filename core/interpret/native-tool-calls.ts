import { parseArgumentsJson } from './hermes-json-tool-calls.ts';
import { finishCall, interpretCompletion } from './interpret-completion.ts';
import { joinReasoning } from './think-blocks.ts';
import type { Interpretation, NativeAssistantMessage, ParsedCall, ToolSpecForTyping } from './types.ts';

/**
 * An OpenAI-style chat message whose server already split out reasoning and tool calls (evaluation
 * against API models). Each call's `arguments` is a JSON string holding an object (blank means none);
 * its values are then typed exactly like text-format calls, which changes only string values.
 *
 * The content still goes through `interpretCompletion`, so `<think>` blocks a server left in it become
 * reasoning (after `reasoning_content`). When the message has native tool calls they are the calls and
 * any tool-call markup in the content is only removed from the text (a server that parsed calls has
 * consumed it); without native calls the content's own tool-call blocks are the calls.
 * `thinkPreopened` (the template's generation prompt opened a `<think>`) applies to the content only when the
 * server split out no reasoning: a server that did has already taken the reasoning, and its `</think>`, away.
 */
export function interpretNativeMessage(
  message: NativeAssistantMessage,
  tools: ToolSpecForTyping[],
  options?: { thinkPreopened?: boolean },
): Interpretation {
  const thinkPreopened = (options?.thinkPreopened ?? false) && !message.reasoning_content;
  const content = interpretCompletion(message.content ?? '', tools, { thinkPreopened });
  const reasoning = joinReasoning([message.reasoning_content ?? '', content.reasoning]);
  const nativeCalls = message.tool_calls ?? [];
  if (nativeCalls.length === 0) return { ...content, reasoning };
  const toolCalls = nativeCalls.map((call, index) => {
    const { name, arguments: json } = call.function;
    const parsed: ParsedCall =
      typeof json === 'string'
        ? parseArgumentsJson(json, name)
        : { ok: false, name, error: 'malformed native tool call: "arguments" is not a JSON string' };
    return finishCall(index, parsed, JSON.stringify(call.function), tools);
  });
  return { reasoning, text: content.text, toolCalls, format: 'native' };
}

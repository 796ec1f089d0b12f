import { typeArguments } from './argument-typing.ts';
import { segmentCompletion, TOOL_CALL_CLOSE } from './completion-segments.ts';
import { parseHermesJsonCall, recoverHermesName } from './hermes-json-tool-calls.ts';
import { looksLikeQwen3Xml, parseQwen3XmlCall, recoverQwen3XmlName } from './qwen3-xml-tool-calls.ts';
import { joinReasoning } from './think-blocks.ts';
import type { Interpretation, InterpretedToolCall, ParsedCall, ToolSpecForTyping } from './types.ts';

/**
 * Turns a parsed call into the interpreted one. Arguments are typed from the named tool's schema; a tool
 * we do not know is no interpreter error (the episode loop answers "unknown tool"), its arguments are
 * simply left untyped. A call with a parse error carries no arguments, so nothing half-parsed ever runs.
 */
export function finishCall(
  index: number,
  parsed: ParsedCall,
  raw: string,
  tools: readonly ToolSpecForTyping[],
): InterpretedToolCall {
  if (!parsed.ok) return { index, name: parsed.name, arguments: {}, parseError: parsed.error, raw };
  const tool = tools.find((candidate) => candidate.name === parsed.name);
  const args = tool === undefined ? { ...parsed.arguments } : typeArguments(parsed.arguments, tool.inputSchema);
  return { index, name: parsed.name, arguments: args, raw };
}

function parseBlock(body: string, closed: boolean): { parsed: ParsedCall; format: 'qwen3_xml' | 'hermes_json' } {
  const format = looksLikeQwen3Xml(body) ? 'qwen3_xml' : 'hermes_json';
  if (!closed) {
    const name = format === 'qwen3_xml' ? recoverQwen3XmlName(body) : recoverHermesName(body);
    const error = `tool call is not closed by ${TOOL_CALL_CLOSE} (the output was probably cut off); it was not run`;
    return { parsed: { ok: false, name, error }, format };
  }
  return { parsed: format === 'qwen3_xml' ? parseQwen3XmlCall(body) : parseHermesJsonCall(body), format };
}

/**
 * The one reading of raw model output shared by training and evaluation: reasoning, visible text (the
 * rest with tool-call blocks removed) and tool calls with typed arguments. `format` is 'plain' when there
 * is no tool-call block, else the syntax of the first block (a block starting with "<" is XML, any other
 * is read as JSON so its parse error says what is wrong).
 */
export function interpretCompletion(
  raw: string,
  tools: ToolSpecForTyping[],
  options?: { thinkPreopened?: boolean },
): Interpretation {
  const reasoning: string[] = [];
  const text: string[] = [];
  const toolCalls: InterpretedToolCall[] = [];
  let format: Interpretation['format'] = 'plain';
  for (const segment of segmentCompletion(raw, options?.thinkPreopened ?? false)) {
    if (segment.kind === 'reasoning') reasoning.push(segment.content);
    else if (segment.kind === 'text') text.push(segment.content);
    else {
      const block = parseBlock(segment.body, segment.closed);
      if (toolCalls.length === 0) format = block.format;
      toolCalls.push(finishCall(toolCalls.length, block.parsed, segment.raw, tools));
    }
  }
  return { reasoning: joinReasoning(reasoning), text: text.join('').trim(), toolCalls, format };
}

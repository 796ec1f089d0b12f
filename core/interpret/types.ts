/**
 * A tool as the interpreter needs it: its name and the JSON Schema of its arguments (an object schema with
 * `properties`).
 */
export interface ToolSpecForTyping {
  name: string;
  inputSchema: Record<string, unknown>;
}

export interface InterpretedToolCall {
  /** Position among this completion's tool calls, from 0, in the order the model emitted them. */
  index: number;
  /** The called tool's name; '' when the call was too malformed to recover one. */
  name: string;
  /** Arguments typed from the tool's schema; {} whenever `parseError` is set. */
  arguments: Record<string, unknown>;
  /**
   * set when the call's arguments could not be parsed at all (malformed JSON / XML); the agent gets this text as the
   * tool response
   */
  parseError?: string;
  /** The call exactly as emitted: the whole `<tool_call>...</tool_call>` block, or the native call as JSON. */
  raw: string;
}

export type InterpretationFormat = 'plain' | 'qwen3_xml' | 'hermes_json' | 'native';

export interface Interpretation {
  reasoning: string;
  text: string;
  toolCalls: InterpretedToolCall[];
  format: InterpretationFormat;
}

export interface NativeToolCall {
  id?: string;
  type?: string;
  function: { name: string; arguments: string };
}

export interface NativeAssistantMessage {
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: NativeToolCall[] | null;
}

/** What a format parser makes of one call before typing: either a name and untyped arguments, or an error. */
export type ParsedCall =
  { ok: true; name: string; arguments: Record<string, unknown> } | { ok: false; name: string; error: string };

export { typeArguments } from './argument-typing.ts';
export { interpretCompletion } from './interpret-completion.ts';
export { interpretNativeMessage } from './native-tool-calls.ts';
export type {
  Interpretation,
  InterpretationFormat,
  InterpretedToolCall,
  NativeAssistantMessage,
  NativeToolCall,
  ToolSpecForTyping,
} from './types.ts';

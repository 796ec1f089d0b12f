import { canonicalJson } from './canonical-json.ts';
import {
  interpretCompletion,
  interpretNativeMessage,
  type Interpretation,
  type NativeToolCall,
  type ToolSpecForTyping,
} from './interpret/index.ts';
import { THINK_CLOSE, THINK_OPEN } from './interpret/think-blocks.ts';

/**
 * Training/evaluation parity: every recorded model output is interpreted again through the path training
 * uses (raw sampled text) and the path evaluation uses (a chat message, possibly with native tool calls),
 * and both are compared with what the episode actually used. Any difference means rewards measured a
 * different agent than evaluation does.
 */

export interface RecordedOutput {
  raw: string;
  native?: NativeToolCall[];
  /** The reasoning a chat server split out of the text (`reasoning_content`), when it did. */
  reasoning?: string;
  /** The text started inside a `<think>` the chat template opened. */
  thinkPreopened?: boolean;
  interpretation: Interpretation;
}
export type InterpretationPath = (output: RecordedOutput, tools: ToolSpecForTyping[]) => Interpretation;

/**
 * The text as sampled: a reasoning the server split out went before the rest, in its think block; otherwise the
 * text starts inside the think the template opened, when it did (a server that splits reasoning never pre-opens).
 */
export const trainingPath: InterpretationPath = (o, tools) =>
  interpretCompletion(o.reasoning ? `${THINK_OPEN}${o.reasoning}${THINK_CLOSE}${o.raw}` : o.raw, tools, {
    thinkPreopened: !o.reasoning && (o.thinkPreopened ?? false),
  });
export const evaluationPath: InterpretationPath = (o, tools) =>
  interpretNativeMessage(
    { content: o.raw, reasoning_content: o.reasoning ?? null, tool_calls: o.native?.length ? o.native : null },
    tools,
    { thinkPreopened: o.thinkPreopened ?? false },
  );

export interface ParityDifference {
  episode: string;
  completion: number;
  field: 'reasoning' | 'text' | 'toolCalls';
  between: string;
  a: unknown;
  b: unknown;
}

function essentials(i: Interpretation) {
  return {
    reasoning: i.reasoning,
    text: i.text,
    toolCalls: i.toolCalls.map((c) => ({ name: c.name, arguments: c.arguments, parseError: c.parseError ?? null })),
  };
}

export function compareOutputs(
  episode: string,
  outputs: RecordedOutput[],
  tools: ToolSpecForTyping[],
  paths = { training: trainingPath, evaluation: evaluationPath },
): ParityDifference[] {
  const diffs: ParityDifference[] = [];
  outputs.forEach((output, index) => {
    // Native tool calls exist only on the evaluation path; the training path never sees them.
    const views: [string, Interpretation][] = [
      ['recorded', output.interpretation],
      ['evaluation', paths.evaluation(output, tools)],
      ...(output.native?.length ? [] : ([['training', paths.training(output, tools)]] as [string, Interpretation][])),
    ];
    const [baseName, base] = views[0]!;
    const b = essentials(base);
    for (const [name, view] of views.slice(1)) {
      const v = essentials(view);
      for (const field of ['reasoning', 'text', 'toolCalls'] as const) {
        if (canonicalJson(b[field]) !== canonicalJson(v[field]))
          diffs.push({
            episode,
            completion: index,
            field,
            between: `${baseName} vs ${name}`,
            a: b[field],
            b: v[field],
          });
      }
    }
  });
  return diffs;
}

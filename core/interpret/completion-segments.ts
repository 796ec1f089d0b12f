import { preopenedReasoningEnd, THINK_CLOSE, THINK_OPEN } from './think-blocks.ts';

export const TOOL_CALL_OPEN = '<tool_call>';
export const TOOL_CALL_CLOSE = '</tool_call>';

export type Segment =
  | { kind: 'text'; content: string }
  | { kind: 'reasoning'; content: string }
  /** `body` is what lies between the tags; `closed` is false for a final block cut off before `</tool_call>`. */
  | { kind: 'tool_call'; raw: string; body: string; closed: boolean };

/**
 * Splits a completion into visible text, reasoning and tool-call blocks in one left-to-right pass.
 * Whichever opening tag comes first owns the span up to its own closing tag, so a `<tool_call>` written
 * inside reasoning is reasoning (as vLLM's reasoning parser runs before its tool parser), and a `<think>`
 * inside a tool call's argument value stays part of that value.
 */
export function segmentCompletion(raw: string, thinkPreopened: boolean): Segment[] {
  const segments: Segment[] = [];
  let position = 0;
  const preopenedEnd = preopenedReasoningEnd(raw, thinkPreopened);
  if (preopenedEnd !== -1) {
    segments.push({ kind: 'reasoning', content: raw.slice(0, preopenedEnd) });
    position = Math.min(raw.length, preopenedEnd + THINK_CLOSE.length);
  }
  while (position < raw.length) {
    const think = raw.indexOf(THINK_OPEN, position);
    const call = raw.indexOf(TOOL_CALL_OPEN, position);
    if (think === -1 && call === -1) {
      segments.push({ kind: 'text', content: raw.slice(position) });
      break;
    }
    const isThink = call === -1 || (think !== -1 && think < call);
    const start = isThink ? think : call;
    const [open, close] = isThink ? [THINK_OPEN, THINK_CLOSE] : [TOOL_CALL_OPEN, TOOL_CALL_CLOSE];
    if (start > position) segments.push({ kind: 'text', content: raw.slice(position, start) });
    const bodyStart = start + open.length;
    const closeAt = raw.indexOf(close, bodyStart);
    const bodyEnd = closeAt === -1 ? raw.length : closeAt;
    const end = closeAt === -1 ? raw.length : closeAt + close.length;
    const body = raw.slice(bodyStart, bodyEnd);
    segments.push(
      isThink
        ? { kind: 'reasoning', content: body }
        : { kind: 'tool_call', raw: raw.slice(start, end), body, closed: closeAt !== -1 },
    );
    position = end;
  }
  return segments;
}

import type { ParsedCall } from './types.ts';

/**
 * Qwen3-Coder / Qwen3.x XML tool calls, the body of one `<tool_call>` block:
 *
 *   <function=NAME>
 *   <parameter=ARG>
 *   VALUE
 *   </parameter>
 *   </function>
 *
 * Values are text: exactly one leading and one trailing newline are stripped, as vLLM's qwen3_xml and
 * qwen3_coder parsers do, and everything else (other whitespace, inner newlines) is kept for typing to
 * trim. The structure is read strictly, so a model learns to emit well-formed calls: anything but
 * whitespace between parameters, an unclosed parameter, a repeated parameter or a missing `</function>`
 * is a parse error (vLLM tolerates some of these; training and evaluation both use this reader).
 */

const FUNCTION_OPEN = '<function=';
const FUNCTION_CLOSE = '</function>';
const PARAMETER_OPEN = '<parameter=';
const PARAMETER_CLOSE = '</parameter>';

export function looksLikeQwen3Xml(body: string): boolean {
  return body.trimStart().startsWith('<');
}

/** The function name of a possibly broken or truncated XML call, or '' when there is none. */
export function recoverQwen3XmlName(body: string): string {
  return /<function=([^>\n]*)>/.exec(body)?.[1]?.trim() ?? '';
}

function stripOneNewline(value: string): string {
  const start = value.startsWith('\n') ? 1 : 0;
  const end = value.endsWith('\n') && value.length > start ? value.length - 1 : value.length;
  return value.slice(start, end);
}

function preview(text: string): string {
  const flat = text.trim().replace(/\s+/g, ' ');
  return JSON.stringify(flat.length > 40 ? `${flat.slice(0, 40)}...` : flat);
}

export function parseQwen3XmlCall(body: string): ParsedCall {
  const call = body.trim();
  const name = recoverQwen3XmlName(call);
  const fail = (problem: string): ParsedCall => ({ ok: false, name, error: `malformed XML tool call: ${problem}` });
  if (!call.startsWith(FUNCTION_OPEN)) return fail(`expected <function=NAME>, found ${preview(call)}`);
  const nameEnd = call.indexOf('>');
  const declaredName = call.slice(FUNCTION_OPEN.length, nameEnd).trim();
  if (nameEnd === -1 || declaredName === '' || declaredName.includes('\n')) {
    return fail('the <function=NAME> tag has no name or is not closed by ">"');
  }
  if (!call.endsWith(FUNCTION_CLOSE)) return fail(`function "${declaredName}" is not closed by </function>`);

  const inner = call.slice(nameEnd + 1, call.length - FUNCTION_CLOSE.length);
  const args: Record<string, unknown> = {};
  let position = 0;
  for (;;) {
    while (position < inner.length && /\s/.test(inner.charAt(position))) position += 1;
    if (position >= inner.length) break;
    if (!inner.startsWith(PARAMETER_OPEN, position)) {
      return fail(`expected <parameter=NAME> or </function>, found ${preview(inner.slice(position))}`);
    }
    const tagEnd = inner.indexOf('>', position);
    const parameter = tagEnd === -1 ? '' : inner.slice(position + PARAMETER_OPEN.length, tagEnd).trim();
    if (parameter === '' || parameter.includes('\n')) {
      return fail('a <parameter=NAME> tag has no name or is not closed by ">"');
    }
    const valueEnd = inner.indexOf(PARAMETER_CLOSE, tagEnd + 1);
    if (valueEnd === -1) return fail(`parameter "${parameter}" is not closed by </parameter>`);
    if (Object.hasOwn(args, parameter)) return fail(`parameter "${parameter}" is given twice`);
    Object.defineProperty(args, parameter, {
      value: stripOneNewline(inner.slice(tagEnd + 1, valueEnd)),
      enumerable: true,
      writable: true,
      configurable: true,
    });
    position = valueEnd + PARAMETER_CLOSE.length;
  }
  return { ok: true, name: declaredName, arguments: args };
}

import { toolCallLine, type EpisodeView, type TranscriptEntry } from './episode-view.ts';

/**
 * One episode as plain text (`tbt episodes show`): the same model as the HTML page, so the same tool calls
 * (`name {canonical JSON arguments}`), verdicts and diff lines. The system prompt is summarised, not printed.
 * Control characters other than newline and tab are shown as `\uXXXX` so a record cannot drive the terminal.
 */

function clean(text: string): string {
  return text.replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

function indent(text: string, prefix = '    '): string {
  return clean(text)
    .split('\n')
    .map((l) => `${prefix}${l}`)
    .join('\n');
}

function entry(e: TranscriptEntry): string[] {
  if (e.kind === 'user') return ['[user]', indent(e.text)];
  if (e.kind === 'tool') return ['[tool result]', indent(e.text)];
  const finish = e.completionFinish && e.completionFinish !== 'stop' ? ` (finish: ${e.completionFinish})` : '';
  const head = `[agent, turn ${e.turn + 1}]${finish}`;
  const out = [head];
  if (e.reasoning) out.push('  reasoning:', indent(e.reasoning));
  if (e.text.trim()) out.push(indent(e.text, '  '));
  for (const c of e.toolCalls) {
    out.push(`  tool call: ${clean(toolCallLine(c))}`, `  result${c.isError ? ' (error)' : ''}:`, indent(c.result));
  }
  if (e.endedTurn) out.push('  (called end_turn)');
  return out;
}

export function renderEpisodeText(v: EpisodeView): string {
  const out: string[] = [
    `episode ${clean(v.id)}`,
    `outcome: ${v.outcome}   reward: ${v.reward}   finish: ${v.finishReason}`,
  ];
  if (v.infrastructure) out.push(`infrastructure class: ${v.infrastructure.class}`);
  if (v.cause) out.push(`cause: ${clean(v.cause)}`);
  for (const f of v.facts) out.push(`${f.label}: ${clean(f.value)}`);
  for (const n of v.notes) out.push(`note: ${clean(n)}`);
  out.push('', '== transcript');
  if (v.system.length)
    out.push(`[system prompt: ${v.system.reduce((n, s) => n + s.length, 0)} characters; see --html]`);
  if (v.context.length) out.push(`[examples and earlier conversation: ${v.context.length} messages; see --html]`);
  if (v.query !== null) out.push('[user, query]', indent(v.query));
  for (const e of v.transcript) out.push(...entry(e));
  out.push('', '== grade');
  const g = v.grade;
  if (!g) out.push('not graded');
  else {
    out.push(`terminal state: ${g.stateMatches ? 'matches the golden state' : 'differs from the golden state'}`);
    if (g.diff.length) {
      out.push(`state diff (${g.diff.length}):`);
      for (const d of g.diff) out.push(`  ${clean(d.path)}: ${clean(d.result)} (expected ${clean(d.golden)})`);
    }
    for (const a of g.assertions) out.push(`assertion ${a.passed ? 'holds' : 'fails'}: ${clean(a.name)}`);
    for (const r of g.rubrics) {
      out.push(`judge: ${r.yes ? 'yes' : 'no'}: ${clean(r.question)}`, indent(`answer: ${r.answer}`));
    }
  }
  return out.join('\n');
}

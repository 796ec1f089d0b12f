import type { EpisodeView, GradeView, ToolCallView, TranscriptEntry } from './episode-view.ts';
import { plural } from './format.ts';
import { htmlPageHead } from './html-page.ts';
import { escapeXml as escape } from './svg-charts.ts';

/**
 * One episode as a static HTML page, like the report: inline CSS, no script, a content security policy that
 * forbids every fetch. The system prompt and earlier context are collapsed (<details>), the rest is open.
 */

const CSS = `
:root { color-scheme: light; --text: #1f2937; --muted: #4b5563; --line: #e5e7eb; --bg: #f8fafc; }
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font: 15px/1.5 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif;
}
header { background: #0f172a; color: #f8fafc; padding: 22px 40px 18px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 650; word-break: break-all; }
header .meta { margin: 0; color: #cbd5e1; font-size: 14px; }
header a { color: #93c5fd; text-decoration: none; font-size: 14px; }
main { max-width: 1100px; margin: 0 auto; padding: 8px 40px 40px; }
section { margin-top: 26px; }
h2 { font-size: 19px; margin: 0 0 8px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr)); gap: 12px; margin-top: 18px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 12px 16px; }
.card .label { font-size: 13px; color: var(--muted); }
.card .value { font-size: 21px; font-weight: 650; word-break: break-word; }
.outcome-success .value { color: #15803d; }
.outcome-agent_failure .value { color: #b91c1c; }
.outcome-infrastructure_error .value { color: #b45309; }
.cause { background: #fff7ed; border: 1px solid #fed7aa; border-radius: 10px; padding: 10px 14px; margin-top: 12px; }
.cause.failure { background: #fef2f2; border-color: #fecaca; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; font-size: 14px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-word; }
.turn { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 10px 14px; margin: 10px 0; }
.turn .who {
  font-size: 12.5px; font-weight: 650; text-transform: uppercase; letter-spacing: 0.04em; color: var(--muted);
}
.turn.user { border-left: 4px solid #2563eb; }
.turn.agent { border-left: 4px solid #7c3aed; }
.turn.system, .turn.context { border-left: 4px solid #94a3b8; }
pre {
  margin: 6px 0 0; white-space: pre-wrap; word-break: break-word;
  font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace;
}
.text { white-space: pre-wrap; word-break: break-word; margin-top: 4px; }
.reasoning { color: var(--muted); font-style: italic; }
details > summary { cursor: pointer; color: var(--muted); font-size: 13.5px; }
.tool-call { border: 1px solid var(--line); border-radius: 8px; margin-top: 8px; overflow: hidden; }
.tool-call .call { background: #f5f3ff; padding: 6px 10px; }
.tool-call .call code { font-weight: 650; }
.tool-call .result { background: #f8fafc; padding: 6px 10px; border-top: 1px solid var(--line); }
.tool-call .result.error { background: #fef2f2; }
.tag { display: inline-block; font-size: 12px; border-radius: 6px; padding: 0 6px; margin-left: 6px; }
.tag.bad { background: #fee2e2; color: #991b1b; }
.tag.good { background: #dcfce7; color: #166534; }
.tag.plain { background: #e5e7eb; color: #374151; }
.table-wrap {
  max-width: 100%; overflow-x: auto; background: #fff; border: 1px solid var(--line); border-radius: 10px;
  margin-top: 8px;
}
table { border-collapse: collapse; font-size: 13.5px; width: 100%; }
th, td { padding: 6px 12px; border-top: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #f1f5f9; font-weight: 600; }
td code { word-break: break-all; }
p.note { font-size: 13px; color: var(--muted); margin: 8px 0 0; }
span.note { font-size: 13px; color: var(--muted); margin-left: 6px; }
`;

const OUTCOME_LABELS: Record<string, string> = {
  success: 'passed',
  agent_failure: 'failed',
  infrastructure_error: 'infrastructure error',
  task_error: 'task error (its test code raised)',
  running: 'running',
};

function tag(text: string, kind: 'good' | 'bad' | 'plain'): string {
  return `<span class="tag ${kind}">${escape(text)}</span>`;
}

function toolCall(c: ToolCallView): string {
  return (
    `<div class="tool-call" data-tool="${escape(c.name)}">` +
    `<div class="call">tool call <code>${escape(c.name)}</code>` +
    `<pre class="arguments">${escape(c.arguments)}</pre></div>` +
    `<div class="result${c.isError ? ' error' : ''}">result${c.isError ? tag('error', 'bad') : ''}` +
    `<pre>${escape(c.result)}</pre></div></div>`
  );
}

function entry(e: TranscriptEntry): string {
  if (e.kind === 'user')
    return `<div class="turn user"><div class="who">user</div><div class="text">${escape(e.text)}</div></div>`;
  if (e.kind === 'tool')
    return `<div class="turn context"><div class="who">tool result</div><pre>${escape(e.text)}</pre></div>`;
  const finish =
    e.completionFinish && e.completionFinish !== 'stop' ? tag(`finish: ${e.completionFinish}`, 'plain') : '';
  return [
    `<div class="turn agent" id="turn-${e.turn}"><div class="who">agent · turn ${e.turn + 1}${finish}` +
      `${e.endedTurn ? tag('called end_turn', 'plain') : ''}</div>`,
    e.reasoning
      ? `<details class="reasoning" open><summary>reasoning</summary>` +
        `<div class="text">${escape(e.reasoning)}</div></details>`
      : '',
    e.text.trim() ? `<div class="text">${escape(e.text)}</div>` : '',
    ...e.toolCalls.map(toolCall),
    '</div>',
  ].join('\n');
}

function transcriptSection(v: EpisodeView): string {
  const system = v.system.length
    ? `<details class="turn system"><summary>system prompt (${plural(v.system.length, 'message')}, ` +
      `${v.system.reduce((n, s) => n + s.length, 0).toLocaleString('en-US')} characters)</summary>` +
      `${v.system.map((s) => `<pre>${escape(s)}</pre>`).join('')}</details>`
    : '';
  const context = v.context.length
    ? `<details class="turn context"><summary>examples and earlier conversation (${v.context.length} messages)` +
      `</summary>` +
      v.context.map((m) => `<div class="who">${escape(m.role)}</div><pre>${escape(m.text)}</pre>`).join('') +
      `</details>`
    : '';
  const query =
    v.query === null
      ? ''
      : `<div class="turn user"><div class="who">user · query</div><div class="text">${escape(v.query)}</div></div>`;
  const calls = v.transcript.reduce((n, e) => n + (e.kind === 'agent' ? e.toolCalls.length : 0), 0);
  const turns = v.transcript.filter((e) => e.kind === 'agent').length;
  return [
    '<section id="transcript">',
    `<h2>Transcript</h2><p class="note">${plural(turns, 'agent turn')}, ${plural(calls, 'tool call')}.</p>`,
    system,
    context,
    query,
    ...v.transcript.map(entry),
    '</section>',
  ]
    .filter(Boolean)
    .join('\n');
}

function gradeSection(g: GradeView | null): string {
  if (!g) return '<section id="grade"><h2>Grade</h2><p class="note">Not graded.</p></section>';
  const diff = g.diff.length
    ? `<div class="table-wrap"><table class="diff"><thead><tr><th>row / column</th><th>terminal state</th>` +
      `<th>expected (golden)</th></tr></thead><tbody>` +
      g.diff
        .map(
          (d) =>
            `<tr><td><code>${escape(d.path)}</code></td><td><code>${escape(d.result)}</code></td>` +
            `<td><code>${escape(d.golden)}</code></td></tr>`,
        )
        .join('') +
      `</tbody></table></div>`
    : '';
  const assertions = g.assertions.length
    ? `<h3>SQL assertions</h3><ul>${g.assertions
        .map((a) => `<li>${escape(a.name)} ${a.passed ? tag('holds', 'good') : tag('fails', 'bad')}</li>`)
        .join('')}</ul>`
    : '';
  const rubrics = g.rubrics.length
    ? `<h3>Judge</h3><div class="table-wrap"><table class="judge"><thead><tr><th>question</th><th>answer</th>` +
      `<th>verdict</th></tr></thead><tbody>${g.rubrics
        .map(
          (r) =>
            `<tr><td>${escape(r.question)}</td><td>${escape(r.answer)}</td>` +
            `<td>${r.yes ? tag('yes', 'good') : tag('no', 'bad')}</td></tr>`,
        )
        .join('')}</tbody></table></div>`
    : '';
  return [
    '<section id="grade">',
    '<h2>Grade</h2>',
    `<p>Terminal state ` +
      (g.stateMatches ? tag('matches the golden state', 'good') : tag('differs from the golden state', 'bad')) +
      ` <span class="note">result <code>${escape(g.resultHash.slice(0, 16))}</code>, golden ` +
      `<code>${escape(g.goldenHash.slice(0, 16))}</code></span></p>`,
    g.diff.length ? `<h3>State diff (${g.diff.length})</h3>${diff}` : '',
    assertions,
    rubrics,
    '</section>',
  ]
    .filter(Boolean)
    .join('\n');
}

export interface EpisodePageOptions {
  /** Link back to the page that lists the episode (the report). */
  back?: { href: string; label: string };
}

export function renderEpisodePage(v: EpisodeView, options: EpisodePageOptions = {}): string {
  const outcome = OUTCOME_LABELS[v.outcome] ?? v.outcome;
  const cards = [
    { label: 'outcome', value: outcome, cls: ` outcome-${v.outcome}` },
    { label: 'reward', value: v.reward, cls: '' },
    { label: 'finish reason', value: v.finishReason, cls: '' },
    ...(v.infrastructure ? [{ label: 'infrastructure class', value: v.infrastructure.class, cls: '' }] : []),
  ]
    .map(
      (c) =>
        `<div class="card${c.cls}"><div class="label">${escape(c.label)}</div>` +
        `<div class="value">${escape(c.value)}</div></div>`,
    )
    .join('\n');
  const cause = v.cause
    ? `<div class="cause${v.outcome === 'agent_failure' ? ' failure' : ''}">` +
      `<strong>cause:</strong> ${escape(v.cause)}</div>`
    : '';
  const back = options.back ? `<a href="${escape(options.back.href)}">← ${escape(options.back.label)}</a>` : '';
  return `${htmlPageHead(`Episode ${v.id}`, CSS)}
<header>
${back}
<h1>${escape(v.taskUid)} · ${escape(outcome)}</h1>
<p class="meta">episode <code>${escape(v.id)}</code></p>
</header>
<main>
<div class="cards">
${cards}
</div>
${cause}
<section id="facts"><h2>Episode</h2><dl class="facts">${v.facts
    .map((f) => `<dt>${escape(f.label)}</dt><dd>${escape(f.value)}</dd>`)
    .join('')}</dl>${v.notes.map((n) => `<p class="note">${escape(n)}</p>`).join('')}</section>
${transcriptSection(v)}
${gradeSection(v.grade)}
</main>
</body>
</html>
`;
}
